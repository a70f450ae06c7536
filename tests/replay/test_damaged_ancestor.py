"""A journal whose ancestor timeline lost frames below a later branch point: the reader calls it
damage of an acknowledged history (not a torn tail). The newest cut covers it: the resume sets
the damaged segment aside (with the history before it) and goes on, and the cut also restores
on its own into a fresh directory, giving a writable journal that restores and verifies clean.
Without a cut that covers it, the open's error names the command that goes on elsewhere."""

from __future__ import annotations

import os
import shutil

import pytest

from journal import Journal, JournalCorrupt, JournalWarning, Reader
from journal.layout import DAMAGED_DIR
from replay import restore
from replay.cli import main as inspect_main
from tests.support.replay_support import make_dataset, recovered_view, ref_of
from snapshot import compact

SEGMENT = 4096


def _run(j: Journal, ds, first: int, step: int) -> None:
    """Twelve rows through training, a committed checkpoint, then a crashed step's dead tail."""
    for i in range(first, first + 12, 3):
        gids = j.taken([ref_of(ds[k]) for k in range(i, i + 3)], loader_state={"pos": i + 3},
                       dataset_size=len(ds))
        j.admitted(gids, target_step=step, policy_version=step)
        j.finished(gids, policy_version=step, locators=[f"dp/{g}" for g in gids])
        j.trained(gids, step=step)
    j.begin_checkpoint(step=step)
    j.commit_checkpoint(step=step)
    for i in range(first + 12, first + 60, 3):  # the dead tail: never checkpointed
        gids = j.taken([ref_of(ds[k]) for k in range(i, i + 3)], loader_state={"pos": i + 3})
        j.admitted(gids, target_step=step + 1)


def _damaged_world(path: str, ds) -> tuple[int, str]:
    """Three timelines (two resumes), a cut on the newest; timeline 2's last (sealed) segment
    truncated mid-frame below the point where timeline 3 branches. Returns (branch LSN of
    timeline 3, the newest cut)."""
    with Journal.open(path, sync="none", segment_bytes=SEGMENT) as j:
        _run(j, ds, 0, 1)
    with Journal.open(path, sync="none", segment_bytes=SEGMENT, resume=restore(path)) as j:
        _run(j, ds, 100, 2)
    with Journal.open(path, sync="none", segment_bytes=SEGMENT, resume=restore(path)) as j:
        _run(j, ds, 200, 3)
    reader = Reader(path)
    assert sorted(reader.timelines) == [1, 2, 3]
    branch = reader.timelines[3].branch_lsn
    assert reader.timelines[3].parent == 2
    cut = compact(path, retention=None).cut_path  # at step 3's checkpoint, on timeline 3
    last = reader.timelines[2].segments[-1]
    assert last.first_lsn < branch - 4, "the test needs the branch point inside that segment"
    victim = next(rec for rec in reader.timeline_records(2) if rec.commit.lsn == branch - 4)
    with open(last.path, "r+b") as f:
        f.truncate(victim.offset + 5)  # half a frame header: looks like a torn tail
    return branch, cut


@pytest.fixture
def world(tmp_path):
    ds = make_dataset(400)
    path = str(tmp_path / "journal")
    branch, cut = _damaged_world(path, ds)
    return path, branch, cut, ds


def test_lost_frames_below_a_branch_are_damage_not_a_torn_tail(world):
    path, branch, _cut, _ds = world
    reader = Reader(path, "salvage")
    list(reader.records())
    for _ in reader.timeline_records(2):
        pass
    assert not [p for p in reader.problems if p.kind == "torn"]
    damaged = [p for p in reader.problems if p.kind == "damaged"]
    assert damaged and damaged[0].lsn == branch - 4
    assert "acknowledged" in damaged[0].message and "timeline 3 branches off timeline 2" in \
        damaged[0].message
    with pytest.raises(JournalCorrupt, match="acknowledged history lost frames"):
        Reader(path, "strict").fold()


def test_the_resume_sets_the_damage_aside_and_the_cut_restores_elsewhere(world, tmp_path):
    path, branch, cut, ds = world
    state = restore(path)  # restores: from the cut, which is past the damage
    assert state.base_cut == cut and state.step == 3
    damaged = Reader(path, "salvage").timelines[2].segments[-1].name
    snapshots = sorted(os.listdir(os.path.join(path, "snapshots")))
    with pytest.warns(JournalWarning, match=f"segment {damaged} is damaged"):
        Journal.open(path, resume=state, sync="none").close()  # the cut covers the damage
    assert damaged in os.listdir(os.path.join(path, DAMAGED_DIR))
    assert sorted(os.listdir(os.path.join(path, "snapshots"))) == snapshots
    assert not os.path.exists(os.path.join(path, "torn"))  # nothing cut off as a "torn tail"
    assert restore(path).step == 3 and inspect_main(["verify", "--json", path]) == 0

    # the advice: restore from the newest cut, resume into a fresh directory
    fresh = str(tmp_path / "fresh")
    state = restore(cut, dataset=ds)
    want = recovered_view(state)
    with Journal.open(fresh, resume=state, sync="none") as j:
        assert recovered_view(restore(fresh)) == want
        gids = j.taken([ref_of(ds[k]) for k in (300, 301)], loader_state={"pos": 302},
                       dataset_size=len(ds))
        j.admitted(gids, target_step=4)
        j.begin_checkpoint(step=4)
        j.commit_checkpoint(step=4)
    again = restore(fresh, dataset=ds)
    assert again.step == 4 and {g.idx for g in again.admitted} >= {300, 301}
    assert inspect_main(["verify", "--json", fresh]) == 0
    with Journal.open(fresh, resume=again, sync="none") as j:  # and it goes on
        gids = [g.group_id for g in again.admitted]
        j.finished(gids, policy_version=4)
        j.trained(gids, step=5)
        j.begin_checkpoint(step=5)
        j.commit_checkpoint(step=5)
    last = restore(fresh, dataset=ds)
    assert last.step == 5 and last.groups == []
    assert inspect_main(["verify", "--json", fresh]) == 0


def test_without_a_cut_over_the_damage_the_open_says_how_to_go_on(world):
    path, _branch, _cut, _ds = world
    shutil.rmtree(os.path.join(path, "snapshots"))
    with pytest.raises(JournalCorrupt) as info:
        Journal.open(path)
    message = str(info.value)
    assert f"journal-inspect rescue {path} NEWDIR" in message and "fresh" in message and "resume=state" in message
    assert not os.path.exists(os.path.join(path, DAMAGED_DIR))
