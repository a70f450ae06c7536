"""The writer's open removes what crashes left that is provably garbage, and only that:
empty and duplicate torn-tail copies, and (while no compaction runs) temporary cuts, archives
being written and a segment beside its identical archive. Each directory changed is fsynced."""

from __future__ import annotations

import os
import random
import shutil

import pytest
import zstandard

from tests.support.faultfs import FaultFS
from journal import GroupRef, Journal, layout, locks
from journal.reader import Segment, read_segment_bytes
from tests.support.journal_model import Model, assert_journal_matches, drive, segment_files, tree_bytes
from snapshot import compact

TAIL = b"\x07" * 40


def _journal(path: str, *, archived: bool = False) -> Model:
    """A journal of several segments; `archived`: a cut and the first segments archived."""
    with Journal.open(path, segment_bytes=4096) as j:
        m = drive(j, Model(), random.Random(5), 120)
        for s in sorted(m.pending):  # a checkpoint the workload left begun is committed first
            j.commit_checkpoint(step=s)
            m = m.commit([("commit", s)])
        step = max(m.committed, default=0) + 1  # above every committed step
        j.begin_checkpoint(step=step)
        j.commit_checkpoint(step=step)
        m = m.commit([("begin", step)]).commit([("commit", step)])
    if archived:
        compact(path, keep_cuts=1)
    return m


def _torn(path: str, name: str) -> str:
    return os.path.join(path, layout.TORN_DIR, name)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _open(path: str) -> FaultFS:
    fs = FaultFS(root=path)
    Journal.open(path, fs=fs, segment_bytes=4096).close()
    return fs


def _fsynced_dirs(fs: FaultFS) -> set[str]:
    return {o.path for o in fs.ops_of("fsync_dir")}


def test_empty_and_duplicate_torn_copies_are_removed(fast_tmp):
    path = str(fast_tmp / "j")
    m = _journal(path)
    seg = segment_files(path)[-1]
    keep = _torn(path, layout.torn_copy_name(seg, 100, 1))
    _write(keep, TAIL)
    _write(_torn(path, layout.torn_copy_name(seg, 100, 2)), TAIL)        # a duplicate, newer
    _write(_torn(path, layout.torn_copy_name(seg, 100, 3)), TAIL[:7])    # a prefix of it
    _write(_torn(path, layout.torn_copy_name(seg, 55, 4)), b"")          # empty
    other = _torn(path, layout.torn_copy_name(seg, 100, 5))
    _write(other, b"\x01" + TAIL)                                         # other bytes: kept
    fs = _open(path)
    assert sorted(os.listdir(os.path.join(path, layout.TORN_DIR))) == sorted(
        [os.path.basename(keep), os.path.basename(other)])
    assert os.path.join(path, layout.TORN_DIR) in _fsynced_dirs(fs)
    with Journal.open(path) as j:
        assert_journal_matches(j, m)


def test_a_torn_tail_already_copied_aside_is_not_copied_again(fast_tmp):
    path = str(fast_tmp / "j")
    m = _journal(path)
    seg = segment_files(path)[-1]
    size = os.path.getsize(os.path.join(path, seg))
    with open(os.path.join(path, seg), "ab") as f:
        f.write(TAIL)
    # the open that copied it crashed before it cut the tail off
    copy = _torn(path, layout.torn_copy_name(seg, size, 1))
    _write(copy, TAIL)
    _open(path)
    assert os.listdir(os.path.join(path, layout.TORN_DIR)) == [os.path.basename(copy)]
    assert os.path.getsize(os.path.join(path, seg)) == size
    with Journal.open(path) as j:
        assert_journal_matches(j, m)


def _compaction_junk(path: str) -> dict[str, str]:
    """What a crashed compaction leaves, by kind -> path (the journal has archived segments)."""
    snaps = os.path.join(path, layout.SNAPSHOTS_DIR)
    cut = sorted(os.listdir(snaps))[0]
    junk = {"cut tmp": os.path.join(snaps, layout.cut_tmp_name(cut, "00ff")),
            "delete tmp": os.path.join(snaps, layout.delete_tmp_name(cut, "a1b2"))}
    for d in junk.values():
        shutil.copytree(os.path.join(snaps, cut), d)
    archive = next(n for n in sorted(os.listdir(path)) if n.endswith(layout.ARCHIVE_SUFFIX))
    timeline, first_lsn, _ = layout.parse_segment_name(archive)
    full = os.path.join(path, archive)
    raw = read_segment_bytes(Segment(full, timeline, first_lsn, True, os.path.getsize(full)))
    live = archive[:-len(layout.ARCHIVE_SUFFIX)] + layout.SEGMENT_SUFFIX
    junk["segment beside its archive"] = os.path.join(path, live)
    _write(junk["segment beside its archive"], raw)
    live_segments = [n for n in segment_files(path) if n.endswith(layout.SEGMENT_SUFFIX)]
    junk["archive tmp"] = os.path.join(path, layout.archive_name(live_segments[-2]) + layout.REPLACE_TMP_SUFFIX)
    _write(junk["archive tmp"], b"half an archive")
    return junk


def test_what_a_crashed_compaction_left_is_removed(fast_tmp):
    path = str(fast_tmp / "j")
    m = _journal(path, archived=True)
    clean = tree_bytes(path)
    junk = _compaction_junk(path)
    fs = _open(path)
    for kind, p in junk.items():
        assert not os.path.exists(p), kind
    assert {path, os.path.join(path, layout.SNAPSHOTS_DIR)} <= _fsynced_dirs(fs)
    after = tree_bytes(path)
    assert {k: v for k, v in after.items() if k in clean} == clean  # nothing else changed ...
    assert set(after) - set(clean) <= {layout.LOCK_NAME}              # ... or appeared
    with Journal.open(path) as j:
        assert_journal_matches(j, m)


def test_a_running_compaction_keeps_its_files(fast_tmp):
    path = str(fast_tmp / "j")
    _journal(path, archived=True)
    junk = _compaction_junk(path)
    with locks.compaction_lock(path):  # as compact() holds it, in this or another process
        _open(path)
    for kind, p in junk.items():
        assert os.path.exists(p), kind
    _open(path)  # and once it is gone, they are garbage
    assert not any(os.path.exists(p) for p in junk.values())


def test_nothing_else_is_removed(fast_tmp):
    path = str(fast_tmp / "j")
    _journal(path, archived=True)
    snaps = os.path.join(path, layout.SNAPSHOTS_DIR)
    cut = sorted(os.listdir(snaps))[0]
    shutil.copytree(os.path.join(snaps, cut), os.path.join(snaps, layout.replaced_name(cut, 7)))
    _write(os.path.join(path, "notes.txt"), b"mine")
    _write(os.path.join(snaps, "README"), b"mine")
    _write(os.path.join(snaps, layout.TMP_PREFIX + "a-file"), b"not a directory")
    _write(_torn(path, "not-a-copy"), b"")
    _write(_torn(path, layout.torn_copy_name(segment_files(path)[-1], 9, 1)), b"a lone copy")
    # the last segment of a timeline beside an identical archive stays: the writer appends to it
    last = segment_files(path)[-1]
    with open(os.path.join(path, last), "rb") as f:
        data = f.read()
    _write(os.path.join(path, layout.archive_name(last)), zstandard.ZstdCompressor().compress(data))
    # a segment beside an archive of other bytes stays (the archive is no copy of it)
    live = [n for n in segment_files(path) if n.endswith(layout.SEGMENT_SUFFIX)][0]
    with open(os.path.join(path, live), "rb") as f:
        other = f.read()[:-1]
    _write(os.path.join(path, layout.archive_name(live)), zstandard.ZstdCompressor().compress(other))
    before = tree_bytes(path)
    _open(path)
    assert tree_bytes(path) == before


def test_compact_removes_the_same_leftovers_under_its_lock(fast_tmp):
    path = str(fast_tmp / "j")
    _journal(path, archived=True)
    with Journal.open(path, segment_bytes=4096) as j:  # a crash of a compaction beside the writer
        junk = _compaction_junk(path)
        j.taken([GroupRef(idx=1)])
        compact(path, journal=j, at="end")
    assert not any(os.path.exists(p) for p in junk.values())


def _unpublished(path: str) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith(layout.SEGMENT_SUFFIX + layout.UNPUBLISHED_SUFFIX)]


def test_the_unpublished_segment_of_a_resume_that_hit_a_full_disk_goes_at_the_next_open(tmp_path):
    """A resume on a full disk: its branch's first segment (`*.wal.new`) got its header, its
    first commit did not (ENOSPC): the open raises and the file stays. Only the writer that made
    such a file ever publishes it, in the same open, so the next open that succeeds removes it,
    also one that does not resume (an in-place resume at the same point replaces it anyway)."""
    import errno

    from journal import JournalError
    from replay import restore

    path = str(tmp_path / "journal")
    with Journal.open(path) as j:
        j.taken([GroupRef(idx=1)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        j.taken([GroupRef(idx=2)])   # the dead tail a resume branches away from
    fs = FaultFS(root=path)
    fs.inject("write", nth=2, error=errno.ENOSPC, persistent=True, path_contains=layout.UNPUBLISHED_SUFFIX)
    with pytest.raises(JournalError):
        Journal.open(path, resume=restore(path), fs=fs)
    assert len(_unpublished(path)) == 1
    with Journal.open(path) as j:   # space again
        assert j.lsn == 4
    assert _unpublished(path) == []
