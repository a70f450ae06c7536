"""Tests 4 and 5, and the edges of restore: a checkpoint begun but never committed, resume
on a new branch with a stale cut on the dead one, no checkpoint at all, and a trainer
checkpoint directory restored without its journal."""

from __future__ import annotations

import os

import pytest
import torch

import replay
from journal import Journal, Owner, Reader, Restored, Taken
from replay import restore
from tests.support.equality import deep_equal
from tests.support.replay_support import (assert_same, locator_of, make_dataset, recovered_view, ref_of,
                                          state_view)
from snapshot import compact

DS = make_dataset(500)


class Driver:
    """A trainer-shaped sequence of transitions on a journal: steps take a few rows, admit,
    finish and train them, with the loader position as the loader state."""

    def __init__(self, j: Journal, pos: int = 0):
        self.j, self.pos = j, pos

    def take(self, n: int) -> list[int]:
        rows = [DS[(self.pos + i) % len(DS)] for i in range(n)]
        self.pos += n
        return self.j.taken([ref_of(r) for r in rows],
                            loader_state={"pos": self.pos, "rng": torch.tensor([self.pos, 7])})

    def step(self, s: int) -> list[int]:
        """Train step s on two groups taken now, leave two admitted and one reserved."""
        gids = self.take(5)
        self.j.admitted(gids[:4], target_step=s, policy_version=s - 1)
        self.j.finished(gids[:2], policy_version=s - 1, locators=[locator_of(g) for g in gids[:2]])
        self.j.trained(gids[:1], step=s)
        return gids


def test_crash_between_begun_and_committed_restores_previous_checkpoint(tmp_path):
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    d = Driver(j)
    for s in (1, 2, 3):
        d.step(s)
    l3 = j.begin_checkpoint(step=3)
    at_l3 = j.state_copy()
    j.commit_checkpoint(step=3)
    d.step(4)
    l4 = j.begin_checkpoint(step=4)    # the trainer starts saving the step-4 weights...
    d.step(5)                          # ...generation goes on meanwhile...
    compact(path, at=l4, retention=None)      # an eager compactor even cuts at L4
    j.close()                          # ...and the process dies before checkpoint_committed(4)

    state = restore(path)
    assert (state.lsn, state.step) == (l3, 3)
    assert_same(recovered_view(state), state_view(at_l3))
    assert any("after the restore point" in s.reason for s in state.skipped)
    with pytest.raises(replay.RestoreError, match="no committed checkpoint for step 4"):
        restore(path, step=4)
    assert restore(path, step=3).lsn == l3

    # the same when the kill tears the checkpoint_committed frame itself
    with Journal.open(path, sync="none") as j:
        j.commit_checkpoint(step=4)
    assert restore(path).step == 4
    last = list(Reader(path).records())[-1]
    seg = os.path.join(path, last.segment)
    os.truncate(seg, os.path.getsize(seg) - 3)   # the commit marker's frame, torn
    state = restore(path)
    assert (state.lsn, state.step) == (l3, 3)
    assert_same(recovered_view(state), state_view(at_l3))


def test_resume_run_on_crash_restore_again(tmp_path):
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none", segment_bytes=4096)
    d = Driver(j)
    for s in (1, 2):
        d.step(s)
    l1 = j.begin_checkpoint(step=2)
    j.commit_checkpoint(step=2)
    for s in (3, 4, 5):
        d.step(s)
    stale_cut = compact(path, at="end", retention=None).cut_path   # a cut on timeline 1, after L1
    stale_lsn = j.lsn
    j.begin_checkpoint(step=5)                                      # never committed
    dead_ids = {g.group_id for g in j.groups()} | set(range(j.state_copy().next_group_id))
    j.close()                                                       # crash

    first = restore(path)
    assert (first.lsn, first.step) == (l1, 2)
    assert stale_cut in [s.path for s in first.skipped]             # after the restore point

    j = Journal.open(path, sync="none", segment_bytes=4096, resume=first)
    assert j.timeline == 2 and j.owner_of(max(dead_ids)) is None    # the dead tail is not the state
    d = Driver(j, pos=first.loader_state["pos"])
    new_ids = []
    for s in (3, 4, 5, 6):
        new_ids += d.step(s)
    assert j.lsn > stale_lsn                                        # the new branch reuses the stale cut's LSN
    assert min(new_ids) > max(dead_ids)                             # ids never collide with the dead tail
    good_cut = compact(path, at="end", retention=None).cut_path     # a cut on the new branch
    l2 = j.begin_checkpoint(step=6)
    at_l2 = j.state_copy()
    j.commit_checkpoint(step=6)
    d.step(7)
    j.close()                                                       # crash again

    second = restore(path)
    assert (second.lsn, second.step) == (l2, 6)
    assert_same(recovered_view(second), state_view(at_l2))
    assert second.base_cut == good_cut                             # built on the new branch's cut
    reasons = {s.path: s.reason for s in second.skipped}
    assert stale_cut in reasons and "JournalMismatch" in reasons[stale_cut] and "stale" in reasons[stale_cut]
    with pytest.raises(replay.JournalMismatch):
        restore(stale_cut)                                          # named explicitly: an error

    # the dead tail stays readable, for forensics and salvage, with every id it handed out
    tails = list(Reader(path).dead_tails())
    assert [(t, b) for t, b, _ in tails] == [(1, l1)]
    tail_records = list(tails[0][2])
    assert tail_records[0].commit.lsn == l1 + 1 and tail_records[-1].commit.lsn >= stale_lsn
    tail_ids = {tg.group_id for r in tail_records for ev in r.commit.events if type(ev) is Taken
                for tg in ev.groups}
    assert tail_ids and tail_ids <= dead_ids and not tail_ids & set(new_ids)
    # and a full fold of the active history is exactly the new branch's
    assert Reader(path).fold().lsn == j.lsn


def test_restore_an_older_checkpoint_after_a_resume(tmp_path):
    """restore(step=S) of a checkpoint before the newest branch point, then resume from it:
    the new branch must hang off the timeline that holds that checkpoint."""
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    d = Driver(j)
    marks = {}
    for s in (1, 2, 3):
        d.step(s)
        marks[s] = (j.begin_checkpoint(step=s), j.state_copy())
        j.commit_checkpoint(step=s)
    d.step(4)  # a dead tail, so the resume at step 3 branches (timeline 2)
    j.close()
    with Journal.open(path, sync="none", resume=restore(path, step=3)) as j:
        Driver(j, pos=1000).step(4)
    old = restore(path, step=1)
    assert_same(recovered_view(old), state_view(marks[1][1]))
    with Journal.open(path, sync="none", resume=old) as j:
        Driver(j, pos=2000).step(2)
        end = j.lsn
    state = restore(path, at="end")
    assert state.lsn == end and Reader(path).fold().lsn == end
    assert {t.timeline for t in Reader(path).lineage()} == {1, 3}


def test_no_committed_checkpoint_restores_the_empty_state(tmp_path):
    path = str(tmp_path / "journal")
    fresh = restore(str(tmp_path))  # an empty directory: a first start
    assert fresh.loader_state is None and fresh.lsn == 0 and fresh.groups == []
    j = Journal.open(path, sync="none", resume=restore(path) if os.path.isdir(path) else None)
    d = Driver(j)
    used = d.step(1) + d.step(2)
    j.begin_checkpoint(step=2)          # begun, never committed
    j.close()
    state = restore(path)
    assert state.loader_state is None and state.lsn == 0 and state.step is None
    assert (state.reserved, state.admitted, state.replay, state.spare) == ([], [], [], [])
    assert set(state.counts.values()) == {0}
    end = restore(path, at="end").lsn
    with Journal.open(path, sync="none", resume=state) as j:   # a restart runs the same code
        assert j.lsn == 1  # the new branch's first commit: the restore's record, nothing else
        (g,) = j.taken([ref_of(DS[0])], loader_state={"pos": 1})
        assert g > max(used)
    (first, _) = [rec.commit for rec in Reader(path).records()]
    (record,) = first.events
    assert (type(record), record.point, record.step, record.crash_lsn) == (Restored, 0, None, end)
    assert restore(path, at="end").lsn == 2


def test_restore_from_a_cut_alone_then_resume_into_a_fresh_journal(tmp_path):
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    d = Driver(j)
    for s in range(1, 9):
        d.step(s)
    l8 = j.begin_checkpoint(step=8)
    j.commit_checkpoint(step=8)
    d.step(9)
    top = j.state_copy().next_group_id
    j.close()
    ckpt = str(tmp_path / "ckpt" / "step_8" / "ownership")
    result = compact(path, into=ckpt, retention=None)
    assert (result.lsn, result.step) == (l8, 8)

    from_cut = restore(ckpt)
    from_journal = restore(path, step=8)
    assert from_cut.source == "cut" and from_cut.base_cut == ckpt
    assert_same(recovered_view(from_cut), recovered_view(from_journal))
    assert (from_cut.lsn, from_cut.step) == (l8, 8)

    # the old journal is gone (another machine): resume into a fresh, empty directory
    fresh = str(tmp_path / "new-journal")
    j = Journal.open(fresh, sync="none", resume=from_cut)
    assert j.lsn == l8 + 1                          # the step-8 checkpoint re-marked as committed
    assert j.owner_of(from_cut.admitted[0].group_id) == Owner.ADMITTED
    d = Driver(j, pos=from_cut.loader_state["pos"])
    gids = d.step(9)
    assert min(gids) >= from_cut.fold_state.next_group_id
    l9 = j.begin_checkpoint(step=9)
    at_l9 = j.state_copy()
    j.commit_checkpoint(step=9)
    d.step(10)
    j.close()                                       # crash

    # the fresh journal restores on its own (its base cut was seeded on resume)
    again = restore(fresh)
    assert (again.lsn, again.step) == (l9, 9) and again.source == "journal"
    assert_same(recovered_view(again), state_view(at_l9))
    assert os.path.dirname(again.base_cut) == os.path.join(fresh, "snapshots")
    back8 = restore(fresh, step=8)
    assert_same(recovered_view(back8), recovered_view(from_cut))
    assert deep_equal(back8.loader_state, from_cut.loader_state)
    assert compact(fresh, retention=None).lsn == l9
    assert top >= from_cut.fold_state.next_group_id


def test_restore_point_far_behind_the_end(tmp_path, monkeypatch):
    """restore folds the tail once to the end and takes back the commits after the point; when
    too many follow it (bounded memory), it folds again from a cut instead. Same state."""
    import sys
    sa = sys.modules["snapshot.state_at"]  # (the package re-exports a function of that name)
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    d = Driver(j)
    d.step(1)
    compact(path, at="end", retention=None)
    d.step(2)
    l2 = j.begin_checkpoint(step=2)
    at_l2 = j.state_copy()
    j.commit_checkpoint(step=2)
    for s in range(3, 9):
        d.step(s)
    j.begin_checkpoint(step=9)                      # never committed: the point stays at L2
    j.close()
    normal = restore(path)
    monkeypatch.setattr(sa, "_MAX_UNDO_COMMITS", 3)
    bounded = restore(path)
    for state in (normal, bounded):
        assert (state.lsn, state.step) == (l2, 2)
        assert_same(recovered_view(state), state_view(at_l2))
    assert normal.base_cut == bounded.base_cut is not None
