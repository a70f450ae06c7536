"""A restart reads the history after the newest cut, not the history before it.

Every cut records where its LSN lies in the journal (`journal/position.py`); `restore` and
`Journal.open` read the cut's segment from that offset on. Here: nothing of the segment between
its header and the offset is read (counted at the reader's file reads, and proved again by overwriting those
bytes with garbage, which `verify` still finds); the state equals the fold from LSN 1 over random
histories (branches, rotations, loader-state blobs an earlier part of the segment stores); a
position that does not verify is passed over; and a restore whose loader state holds no tensor
imports no torch (its cut's `.pt` tables are checked by sha256 and not loaded)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal.reader
from journal import GroupRef, Journal, JournalCorrupt, JournalWarning, Reader, RolloutRef, position
from journal.format import HEADER_SIZE
from journal.layout import POSITION_FILE, SNAPSHOTS_DIR
from replay import restore, verify
from snapshot import compact
from tests.support.bench_run import ENV
from tests.support.loader_states import loader_state
from tests.support.segment_reads import scan_max_group_id
from tests.support.snapshot_support import HypothesisPicker, assert_same_state, drive
from tests.support.journal_model import fold_records


class _CountedFile:
    """A file of the reader's whose reads are logged as (path, first byte, byte count)."""

    def __init__(self, f, path: str, log: list):
        self._f, self._path, self._log = f, path, log

    def read(self, n: int = -1) -> bytes:
        at = self._f.tell()
        data = self._f.read(n)
        self._log.append((self._path, at, len(data)))
        return data

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


@pytest.fixture
def segment_bytes_read(monkeypatch):
    """Every read of the reader's files from now on: (path, first byte, byte count)."""
    log: list = []

    def counted_open(path, mode="r", *args, **kwargs):
        return _CountedFile(open(path, mode, *args, **kwargs), os.fspath(path), log)

    monkeypatch.setattr(journal.reader, "open", counted_open, raising=False)
    return log


def _history(path: str, groups: int) -> None:
    """`groups` groups taken (a loader state with a blob), admitted, finished, trained, one commit
    each, a committed checkpoint every 50 groups; then 5 groups in flight, 2 of their 4 rollouts
    sealed (a restore fences the others: their attempts are looked up); a last checkpoint and a
    cut at it; then a short tail."""
    with Journal.open(path, sync="none") as j:
        for i in range(groups):
            (g,) = j.taken([GroupRef(idx=i)], loader_state=loader_state(i + 1, 0))
            j.admitted([g], target_step=i // 50 + 1)
            j.finished([g], policy_version=1)
            j.trained([g], step=i // 50 + 1)
            if i % 50 == 49:
                j.begin_checkpoint(step=i // 50 + 1)
                j.commit_checkpoint(step=i // 50 + 1)
        flying = j.taken([GroupRef(idx=groups + k) for k in range(5)], loader_state=loader_state(groups + 5, 0))
        j.admitted(flying, target_step=groups // 50 + 2, rollouts=4)
        j.rollout_sealed([RolloutRef(g, k, 0, f"dp/{g}/{k}") for g in flying for k in (0, 1)])
        j.begin_checkpoint(step=groups // 50 + 1)
        j.commit_checkpoint(step=groups // 50 + 1)
        compact(path, journal=j, retention=None)
        for i in range(groups + 5, groups + 12):  # taken after the checkpoint: the dead tail
            j.taken([GroupRef(idx=i)], loader_state=loader_state(i + 1, 0))


def _newest_position(path: str) -> position.Position:
    cuts = sorted(os.listdir(os.path.join(path, SNAPSHOTS_DIR)))
    with open(os.path.join(path, SNAPSHOTS_DIR, cuts[-1], POSITION_FILE), "rb") as f:
        return position.decode(f.read())


def _full_fold_at(path: str, lsn: int):
    """The reference: the active history folded from LSN 1 (no position is used from there)."""
    return Reader(path).fold(stop_lsn=lsn)


def _restore_and_open(path: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        state = restore(path)
        with Journal.open(path, sync="none", resume=state) as j:
            opened = j.state_copy()
    return state, opened


def test_restore_and_open_read_nothing_before_the_cut(fast_tmp, segment_bytes_read):
    path = str(fast_tmp / "j")
    _history(path, 400)
    at = _newest_position(path)
    assert at.offset > 10_000, at  # the history before the cut is a large part of the segment
    segment = os.path.join(path, at.segment)
    want = _full_fold_at(path, at.lsn)  # what a full read gives (read before the count starts)
    segment_bytes_read.clear()
    state, opened = _restore_and_open(path)
    reads = [(first, n) for p, first, n in segment_bytes_read if p == segment and n]
    assert reads, "the segment was not read at all"
    # the header (which segment, which run, which chain seed) is read; nothing between it and the cut
    before = [(first, n) for first, n in reads if first < at.offset and first + n > HEADER_SIZE]
    assert not before, f"read {before} of {at.segment}, before the cut's offset {at.offset}"
    assert_same_state(state.fold_state, want, "restore")
    assert len(state.admitted) == 5 and all(r.attempt == 1 for g in state.admitted for r in g.pending)
    assert opened.lsn == want.lsn + 1, "the resume's first commit: the checkpoint and the fences"


def test_garbage_before_the_position_is_never_read_and_verify_finds_it(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path, 200)
    at = _newest_position(path)
    want = _full_fold_at(path, at.lsn)
    with open(os.path.join(path, at.segment), "r+b") as f:
        f.seek(200)  # after the header and the first frames
        f.write(b"\xa5" * (at.offset - 200))
    state, _ = _restore_and_open(path)
    assert_same_state(state.fold_state, want, "restore over garbage before the position")
    report = verify(path)
    assert not report.clean and any(at.segment in str(p) for p in report.problems), report.problems


def test_a_blob_stored_before_the_position_is_read_when_a_later_take_references_it(fast_tmp):
    """Epochs 0, 1, 0: the tail's loader state references the epoch-0 generator, which only the
    part of the segment before the cut stores."""
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        for i, epoch in enumerate([0] * 30 + [1] * 30):
            (g,) = j.taken([GroupRef(idx=i)], loader_state=loader_state(i, epoch))
            j.admitted([g], target_step=1)
            j.finished([g], policy_version=1)
            j.trained([g], step=1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        compact(path, journal=j, retention=None)
        j.taken([GroupRef(idx=60)], loader_state=loader_state(60, 0))
        j.begin_checkpoint(step=2)
        j.commit_checkpoint(step=2)
    state, _ = _restore_and_open(path)
    assert state.lsn > _newest_position(path).lsn
    assert state.loader_state["_num_yielded"] == 60
    assert_same_state(state.fold_state, _full_fold_at(path, state.lsn), "blob from before the position")


def test_a_position_that_does_not_verify_is_passed_over(fast_tmp, segment_bytes_read):
    path = str(fast_tmp / "j")
    _history(path, 100)
    at = _newest_position(path)
    cut = os.path.join(path, SNAPSHOTS_DIR, sorted(os.listdir(os.path.join(path, SNAPSHOTS_DIR)))[-1])
    wrong = at._replace(chain=at.chain ^ 1)
    with open(os.path.join(cut, POSITION_FILE), "wb") as f:  # the manifest's sha256 is not checked here
        f.write(position.encode(wrong))
    r = Reader(path)
    seg = next(s for s in r.segments if s.name == at.segment)
    assert r.position_in(seg) is None
    segment_bytes_read.clear()
    state = r.fold(state=None, stop_lsn=at.lsn)
    assert any(first < at.offset for p, first, n in segment_bytes_read if p == seg.path), \
        "a position that does not verify must not be read from"
    assert_same_state(state, _full_fold_at(path, at.lsn))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_restore_and_open_from_positions_equal_the_full_fold(tmp_path_factory, data):
    """Random histories (loader states whose blobs change and come back, segments that rotate
    or not, resumes that branch, cuts at random points): restore, open with resume= and open
    without it give the states the fold from LSN 1 gives."""
    path = str(tmp_path_factory.mktemp("seek") / "j")
    pick = HypothesisPicker(data)
    segment_bytes = pick.choice([4096, 64 << 20])
    for run in range(pick.int(1, 3)):
        resume = None
        if run:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                resume = restore(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)
            j = Journal.open(path, sync="none", segment_bytes=segment_bytes, resume=resume)
        with j:
            model = fold_records(Reader(path).records())
            model.next_gid = j.state_copy().next_group_id
            for _ in range(pick.int(1, 3)):
                model = drive(j, pick, pick.int(5, 60), model)
                if pick.bool(0.7):
                    compact(path, pick.choice(["end", "latest-checkpoint"]), journal=j, retention=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = restore(path)
        assert_same_state(got.fold_state, _full_fold_at(path, got.lsn), f"restore after run {run}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)
            with Journal.open(path, sync="none", segment_bytes=segment_bytes) as j:
                opened = j.state_copy()
        want = Reader(path).fold()
        want.next_group_id = max(want.next_group_id, scan_max_group_id(Reader(path)) + 1)
        assert_same_state(opened, want, f"open without resume after run {run}")


_NO_TORCH = ("import sys, warnings\n"
             "warnings.simplefilter('ignore')\n"
             "from replay import restore\n"
             "from journal import Journal\n"
             "state = restore(sys.argv[1])\n"
             "with Journal.open(sys.argv[1], resume=state) as j:\n"
             "    pass\n"
             "print(state.lsn, state.loader_state['n'], 'torch' in sys.modules)\n")


def test_a_restore_from_a_cut_without_tensors_imports_no_torch(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        for i in range(30):
            (g,) = j.taken([GroupRef(idx=i)], loader_state={"n": i + 1, "epoch": 0})
            j.admitted([g], target_step=1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        compact(path, journal=j, retention=None)  # the cut's .pt tables are written with torch
    p = subprocess.run([sys.executable, "-c", _NO_TORCH, path], capture_output=True, text=True,
                       timeout=120, env=ENV)
    assert p.returncode == 0, p.stderr
    lsn, n, torch_loaded = p.stdout.split()
    assert (int(lsn), int(n), torch_loaded) == (_newest_position(path).lsn, 30, "False"), p.stdout


def _rotated_history(path: str, rounds: int) -> None:
    """`rounds` rounds of 20 groups (taken, admitted, finished, trained) in 4 KiB segments, each
    round a committed checkpoint and a cut at its checkpoint_begun (retention archives what the
    cuts cover); then groups in flight at a last checkpoint and its cut, and a tail after it."""
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for r in range(rounds):
            for i in range(20 * r, 20 * r + 20):
                (g,) = j.taken([GroupRef(idx=i)], loader_state=loader_state(i + 1, 0))
                j.admitted([g], target_step=r + 1)
                j.finished([g], policy_version=r)
                j.trained([g], step=r + 1)
            j.begin_checkpoint(step=r + 1)
            compact(path, "end", journal=j, keep_cuts=2, retention="archive")
            j.commit_checkpoint(step=r + 1)
        flying = j.taken([GroupRef(idx=20 * rounds + k) for k in range(3)])
        j.admitted(flying, target_step=rounds + 1, rollouts=4)
        j.rollout_sealed([RolloutRef(g, 0, 0, f"dp/{g}/0") for g in flying])
        j.begin_checkpoint(step=rounds + 1)
        compact(path, "end", journal=j, keep_cuts=2, retention="archive")
        j.commit_checkpoint(step=rounds + 1)
        j.taken([GroupRef(idx=20 * rounds + 3)])


def _archives(path: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".wal.zst"))


def test_a_restore_opens_none_of_the_archives_inside_the_history(fast_tmp, segment_bytes_read):
    path = str(fast_tmp / "j")
    _rotated_history(path, 12)
    archives = _archives(path)
    assert len(archives) >= 6, archives  # a history that rotated and retired most of itself
    segment_bytes_read.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        state = restore(path)
    opened = sorted({p for p, _, _ in segment_bytes_read if p.endswith(".wal.zst")})
    # the first segment gives the timeline its parent; the sealed ones after it are not needed
    assert opened == archives[:1], f"{len(opened)} of {len(archives)} archives read: {opened}"
    assert_same_state(state.fold_state, _full_fold_at(path, state.fold_state.lsn), "restore")
    assert len(state.admitted) == 3 and all(r.attempt == 1 for g in state.admitted for r in g.pending)


def test_a_damaged_archive_header_left_unread_is_found_when_it_is_read(fast_tmp):
    path = str(fast_tmp / "j")
    _rotated_history(path, 8)
    damaged = _archives(path)[2]
    with open(damaged, "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(b"\x07" * 4096))
    name = os.path.basename(damaged)
    r = Reader(path)  # strict: the archive's header is read on first use
    with pytest.raises(JournalCorrupt, match=name):
        for _ in r.records():
            pass
    assert [p.segment for p in Reader(path, "salvage").problems] == [name]  # inspection reads it at once
