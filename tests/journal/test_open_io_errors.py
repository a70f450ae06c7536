"""Every OS error of `Journal.open` (directory, lock, torn-tail copy and cut, segment create,
directory fsync) is a `JournalIOError` naming the path and the operation, and leaves no
partial file: no empty or short copy in torn/, no segment without its header."""

from __future__ import annotations

import errno
import os
import random

import pytest

from tests.support.faultfs import FaultFS
from journal import Journal, JournalIOError
from journal.format import HEADER_SIZE
from tests.support.journal_model import Model, append_and_verify, assert_journal_matches, drive, segment_files

TAIL = b"\x07" * 33


def _torn_journal(path: str) -> Model:
    with Journal.open(path) as j:
        m = drive(j, Model(), random.Random(17), 12)
    (seg,) = segment_files(path)
    with open(os.path.join(path, seg), "ab") as fh:
        fh.write(TAIL)
    return m


def _torn_copies(path: str) -> list[bytes]:
    torn = os.path.join(path, "torn")
    if not os.path.isdir(torn):
        return []
    out = []
    for n in sorted(os.listdir(torn)):
        with open(os.path.join(torn, n), "rb") as fh:
            out.append(fh.read())
    return out


def _no_partial_segment(path: str) -> bool:
    return all(os.path.getsize(os.path.join(path, n)) >= HEADER_SIZE
               for n in os.listdir(path) if n.endswith(".wal") or n.endswith(".wal.new"))


def _ops_of_a_clean_open(path: str, setup) -> int:
    setup(path)
    fs = FaultFS(root=path)
    Journal.open(path, fs=fs).close()
    return len(fs.ops)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_every_failing_step_of_open_with_repair_is_a_journal_io_error(fast_tmp, code):
    n_ops = _ops_of_a_clean_open(str(fast_tmp / "probe"), _torn_journal)
    assert n_ops > 8  # mkdir torn/, copy (create, write, fsync, close, fsync_dir), truncate, ...
    kinds = set()
    for n in range(1, n_ops + 1):
        path = str(fast_tmp / f"j{n}")
        m = _torn_journal(path)
        fs = FaultFS(root=path)
        fs.inject(None, nth=n, error=code)
        try:
            Journal.open(path, fs=fs).close()
        except JournalIOError as exc:
            failed = next(o for o in fs.ops if o.failed)
            kinds.add(failed.kind)
            assert exc.errno == code and exc.operation and exc.path, (n, failed)
            assert exc.path in str(exc) and exc.operation in str(exc)
            assert os.strerror(code) in str(exc)
        # no partial copy and no partial segment, whatever step failed
        assert _torn_copies(path) in ([], [TAIL]), n
        assert _no_partial_segment(path), n
        with Journal.open(path) as j:  # nothing acknowledged is lost; the repair completes
            assert_journal_matches(j, m)
        assert _torn_copies(path) == [TAIL], n  # copied once, never twice
        append_and_verify(path, m)
    assert {"mkdir", "create", "write", "fsync", "truncate", "fsync_dir"} <= kinds


def test_reopening_on_a_full_disk_leaves_no_empty_copies(fast_tmp):
    path = str(fast_tmp / "j")
    m = _torn_journal(path)
    fs = FaultFS(root=path)
    fs.inject("write", nth=1, error=errno.ENOSPC, persistent=True)
    for _ in range(3):
        with pytest.raises(JournalIOError, match="copy the torn tail aside") as info:
            Journal.open(path, fs=fs)
        assert info.value.errno == errno.ENOSPC
        assert _torn_copies(path) == []
    with Journal.open(path) as j:
        assert_journal_matches(j, m)
    assert _torn_copies(path) == [TAIL]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_every_failing_step_of_creating_a_journal_is_a_journal_io_error(fast_tmp, code):
    n_ops = _ops_of_a_clean_open(str(fast_tmp / "probe" / "j"), lambda p: None)
    for n in range(1, n_ops + 1):
        path = str(fast_tmp / f"r{n}" / "j")
        os.makedirs(os.path.dirname(path))
        fs = FaultFS(root=os.path.dirname(path))
        fs.inject(None, nth=n, error=code)
        try:
            Journal.open(path, fs=fs).close()
        except JournalIOError as exc:
            assert exc.errno == code and exc.operation and exc.path
        assert not os.path.exists(path) or _no_partial_segment(path), n
        with Journal.open(path) as j:
            assert j.lsn == 0
