"""Restarting a finished run does not branch: a resume whose first commit would only write again
the checkpoint markers the history already ends with continues the timeline. And retention
retires the segments of dead branches that no kept cut needs (the last segment of a timeline a
resume branched off holds its dead tail; a whole timeline off the active history), so a run
restarted again and again keeps a bounded number of live segments."""

from __future__ import annotations

import os

import pytest

from journal import Journal, Reader
from journal.layout import ARCHIVE_SUFFIX, SEGMENT_SUFFIX
from replay import audit, restore, verify
from snapshot import compact
from tests.support.cli_journals import Loader, Trainer, restarted_run

SEGMENT = 4096
RESTARTS = 18


def _files(path: str) -> tuple[list[str], list[str]]:
    names = sorted(os.listdir(path))
    return ([n for n in names if n.endswith(SEGMENT_SUFFIX)], [n for n in names if n.endswith(ARCHIVE_SUFFIX)])


def _finished_run(path: str) -> None:
    """Three crashes mid-run (three dead tails), then the run finishes: its last checkpoint
    committed, the journal closed."""
    t = Trainer(path, Loader(200), segment_bytes=SEGMENT)
    t.start()
    for _crash in range(3):
        for _ in range(8):
            t.step()
            if t.step_no % 2 == 0:
                t.checkpoint()
        t.step()  # work after the checkpoint: the dead tail of the crash
        t.crash()
        t.resume()
    for _ in range(6):
        t.step()
    t.checkpoint()
    t.j.close()


def test_a_restart_of_a_finished_run_continues_its_timeline(tmp_path):
    path = str(tmp_path / "journal")
    _finished_run(path)
    before = Reader(path)
    timelines, end = sorted(before.timelines), before.fold().lsn
    state = restore(path)
    assert state.lsn == end - 1  # only the last checkpoint's checkpoint_committed after it
    assert [type(ev).__name__ for ev in state.first_commit] == ["CheckpointCommitted"]
    with Journal.open(path, sync="none", segment_bytes=SEGMENT, resume=state) as j:
        assert j.lsn == end and j.timeline == timelines[-1]
    assert sorted(Reader(path).timelines) == timelines  # no new branch, no new segment
    again = restore(path)
    assert (again.lsn, again.step) == (state.lsn, state.step)


def test_restarts_with_compaction_keep_segments_bounded_and_archive_dead_branches(tmp_path):
    path = str(tmp_path / "journal")
    _finished_run(path)
    reader = Reader(path)
    dead_tails = [seg.name for tl in reader.lineage()[:-1] for seg in tl.segments[-1:]]
    assert len(dead_tails) == 3
    for _ in range(RESTARTS):
        state = restore(path)
        with Journal.open(path, sync="none", segment_bytes=SEGMENT, resume=state) as j:
            compact(path, journal=j, retention="archive")
    live, archived = _files(path)
    assert len(Reader(path).timelines) == 4  # the three resumes of the crashes, no more
    assert len(live) <= 2, live  # the active segment, at most one more the kept cuts need
    for name in dead_tails:  # every dead branch's segment archived: still readable
        assert name not in live and name + ".zst" in archived
    assert verify(path).clean and audit(path).clean
    (_t, _b, records), *_ = list(Reader(path).dead_tails())
    assert list(records)  # the dead tails are read from their archives


def test_delete_retention_leaves_every_branch_point_right(tmp_path):
    """retention="delete" after a restart whose timeline has several segments: the parent's
    segments (its dead tail included) go before the child's first one, so no reader follows a
    timeline past its real branch point (readers take it from the first segment on disk)."""
    path = str(tmp_path / "journal")
    restarted_run(path, before=30, dead=1, after=60, compact_every=10, retention="delete",
                  segment_bytes=SEGMENT)
    reader = Reader(path)
    assert sorted(reader.timelines) == [2] and len(reader.timelines[2].segments) >= 2
    live, archived = _files(path)
    assert archived == [] and len(live) <= 3, live
    assert verify(path).clean and audit(path).clean
    state = restore(path)
    assert state.step == 90
