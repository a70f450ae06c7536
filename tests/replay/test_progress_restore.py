"""Restore and prefixes (DESIGN 12, recovery.py rule 5): each unsealed rollout comes back with
the prefix it held at the checkpoint (`RecoveredRollout.progress`), or with the dead tail's
newer one under the salvage rule (weights no newer than the checkpoint, row still in the data
plane); a prefix by newer weights is dropped and reported, never continued; one whose row is
gone is dropped and reported; the resume records the prefix again under the raised attempt, so
a second crash hands it on, and a late prefix of the old attempt is fenced."""

from __future__ import annotations

import pytest

from journal import GroupRef, Journal, Progress, RolloutRef, StaleAttempt
from replay import restore
from tests.support.replay_support import FakeDataPlane

S = 5  # the checkpoint's step


def _prefix(j, dp: FakeDataPlane | None, g: int, index: int, attempt: int, loc: str, tokens: int,
            pv: int | None, turn: int | None = None) -> None:
    if dp is not None:
        dp.put(loc)
    j.rollout_progress(RolloutRef(g, index, attempt, loc), tokens=tokens, turn=turn, policy_version=pv)


@pytest.fixture
def run(fast_tmp):
    """Group g admitted with rollouts=6 before the step-S checkpoint. At the checkpoint: rollout
    0 holds prefix a0 (weights S), 1 holds b0 (weights S), 2 holds c0 by newer weights (S+1),
    3 holds d0 whose row is lost later, 4 and 5 hold nothing. On the dead tail: 1 goes on to
    b1 (weights S: salvaged), 0 goes on to a1 by newer weights (dropped; a0 kept), 4 records
    e1 without weights (those that admitted the group: salvaged), 5 records f1 and is then
    failed (the failure ends it)."""
    path = str(fast_tmp / "j")
    dp = FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=S + 1, policy_version=S, rollouts=6)
        _prefix(j, dp, g, 0, 0, "a0", 100, S)
        _prefix(j, dp, g, 1, 0, "b0", 100, S, turn=2)
        _prefix(j, dp, g, 2, 0, "c0", 100, S + 1)
        _prefix(j, dp, g, 3, 0, "d0", 100, S)
        j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        _prefix(j, dp, g, 1, 0, "b1", 300, S, turn=3)
        _prefix(j, dp, g, 0, 0, "a1", 300, S + 1)
        _prefix(j, dp, g, 4, 0, "e1", 300, None)
        _prefix(j, dp, g, 5, 0, "f1", 300, S)
        j.rollout_failed([RolloutRef(g, 5, 0)], reason="timeout")
    dp.lose("d0")
    return path, dp, g


def test_each_rollout_continues_from_the_prefix_the_rules_keep(run):
    path, dp, g = run
    state = restore(path, data_plane=dp, salvage=True)
    (rg,) = state.admitted
    assert [r.progress for r in rg.rollouts] == [
        Progress("a0", 100, None, S),      # the tail's a1 is by newer weights: the checkpoint's
        Progress("b1", 300, 3, S),         # salvaged from the tail
        None,                              # c0 by newer weights: dropped
        None,                              # d0's row is gone
        Progress("e1", 300, None, S),      # recorded without weights: the admission's, salvaged
        None]                              # f1 ended with its failure
    assert sorted(state.salvaged_progress) == [(g, 1), (g, 4)]
    assert sorted(state.newer_progress) == [(g, 0), (g, 2)]
    assert state.lost_progress == [(g, 3)]
    assert all(r.attempt == 1 for r in rg.rollouts[:5]) and rg.rollouts[5].attempt == 2


def test_without_salvage_only_the_checkpoints_prefixes_come_back(run):
    path, dp, g = run
    state = restore(path, data_plane=dp)
    assert [r.progress for r in state.admitted[0].rollouts][:2] == [Progress("a0", 100, None, S),
                                                                   Progress("b0", 100, 2, S)]
    assert state.salvaged_progress == [] and state.newer_progress == [(g, 2)]
    without_plane = restore(path)  # nothing to ask whether a row is there: kept
    assert without_plane.admitted[0].rollouts[3].progress == Progress("d0", 100, None, S)


def test_the_resume_records_the_prefix_under_the_new_attempt_and_fences_the_old(run):
    path, dp, g = run
    state = restore(path, data_plane=dp, salvage=True)
    with Journal.open(path, sync="none", resume=state) as j:
        r = j.state_copy().live[g].rollouts
        assert r.progress_of(1) == Progress("b1", 300, 3, S) and r.attempts[1] == 1
        assert r.progress_of(2) is None
        with pytest.raises(StaleAttempt, match=f"group {g} rollout 1 names attempt 0"):
            j.rollout_progress(RolloutRef(g, 1, 0, "late"), tokens=400)
        j.begin_checkpoint(step=S + 1)
        j.commit_checkpoint(step=S + 1)
        _prefix(j, dp, g, 1, 1, "b2", 500, S + 2)  # the new attempt goes on, with newer weights
    # a second crash: the carried prefix is what the new checkpoint holds; the tail's b2 is newer
    again = restore(path, data_plane=dp, salvage=True)
    r1 = again.admitted[0].rollouts[1]
    assert r1.progress == Progress("b1", 300, 3, S) and r1.attempt == 2
    assert again.newer_progress == [(g, 1)]


def test_a_demoted_group_keeps_its_prefixes_under_its_new_id(fast_tmp):
    path = str(fast_tmp / "j")
    dp = FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=2, policy_version=1, rollouts=2)
        dp.put("r0")
        j.rollout_sealed([RolloutRef(g, 0, 0, "r0")], policy_version=1)
        _prefix(j, dp, g, 1, 0, "p1", 64, 1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    dp.lose("r0")  # the sealed rollout's row is gone: the group regenerates under a new id
    state = restore(path, data_plane=dp, salvage=True)
    (new,) = state.demoted
    assert new.group_id != g and [r.progress for r in new.rollouts] == [None, Progress("p1", 64, None, 1)]
    with Journal.open(path, sync="none", resume=state) as j:
        assert j.state_copy().live[new.group_id].rollouts.progress_of(1) == Progress("p1", 64, None, 1)


def test_regenerating_on_a_changed_identity_drops_prefixes(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none", identity={"tokenizer": "a"}) as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=2, policy_version=1, rollouts=2)
        _prefix(j, None, g, 1, 0, "p1", 64, 1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    state = restore(path, identity={"tokenizer": "b"}, on_identity_changed="regenerate")
    assert state.dropped_progress == [(g, 1)]
    assert all(r.progress is None for grp in state.admitted for r in grp.rollouts)


def test_a_rollout_the_dead_tail_sealed_comes_back_sealed_without_its_prefix(fast_tmp):
    path = str(fast_tmp / "j")
    dp = FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=2, policy_version=1, rollouts=2)
        _prefix(j, dp, g, 0, 0, "p0", 64, 1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        dp.put("r0")
        j.rollout_sealed([RolloutRef(g, 0, 0, "r0")], policy_version=1)
    state = restore(path, data_plane=dp, salvage=True)
    r0 = state.admitted[0].rollouts[0]
    assert (r0.sealed, r0.locator, r0.progress) == (True, "r0", None)
    assert state.salvaged_rollouts == [(g, 0)]


def test_an_adopted_take_keeps_the_tails_prefix_under_the_salvage_rule(fast_tmp):
    """A batch the dead tail took after the checkpoint comes back adopted under a new id; its
    rollouts' tail prefixes by the checkpoint's weights come with it (at attempt 0 of the new
    id), one by newer weights does not."""
    path = str(fast_tmp / "j")
    dp = FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        (g,) = j.taken([GroupRef(idx=1)], loader_state={"pos": 2})  # the dead tail
        j.admitted([g], target_step=2, policy_version=1, rollouts=2)
        _prefix(j, dp, g, 0, 0, "t0", 30, 1)
        _prefix(j, dp, g, 1, 0, "t1", 30, 2)
    state = restore(path, data_plane=dp, salvage=True)
    (new,) = state.adopted
    assert new.adopted_from == g and new.group_id != g
    assert [(r.attempt, r.progress) for r in new.rollouts] == [(0, Progress("t0", 30, None, 1)), (0, None)]
    assert state.salvaged_progress == [(g, 0)] and state.newer_progress == [(g, 1)]
    with Journal.open(path, sync="none", resume=state) as j:
        assert j.state_copy().live[new.group_id].rollouts.progress_of(0) == Progress("t0", 30, None, 1)
