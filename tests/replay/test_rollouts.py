"""Rollout-level recovery: the ledger's worked example with g21 admitted for step 8 with 4
rollouts, 2 sealed before the checkpoint and 1 after it, then killed; plus lost rows and
the fence against late results of the dead run."""

from __future__ import annotations

import pytest

from journal import (GroupRef, Journal, Owner, OwnershipError, Reader, RolloutFailed, RolloutRef,
                     StaleAttempt)
from replay import restore
from tests.support.replay_support import FakeDataPlane

CHECKPOINT_STEP = 6


def _loc(g: int, i: int) -> str:
    return f"tq/{g}/{i}"


@pytest.fixture
def killed_run(tmp_path):
    """g20 finished (replay), g21 admitted with 4 rollouts: 0 and 1 sealed before the
    checkpoint, 2 sealed after it with the checkpoint's weights, 3 failed once after it."""
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    j = Journal.open(path, sync="none")
    g20, g21, g22 = j.taken([GroupRef(idx=i) for i in (20, 21, 22)], loader_state={"pos": 3})
    j.admitted([g20], target_step=7, policy_version=6, rollouts=4)
    for i in range(4):
        dp.put(_loc(g20, i))
        j.rollout_sealed([RolloutRef(g20, i, 0, _loc(g20, i))], policy_version=6)
    j.finished([g20], policy_version=6)
    j.admitted([g21], target_step=8, policy_version=6, rollouts=4)
    for i in (0, 1):
        dp.put(_loc(g21, i))
        j.rollout_sealed([RolloutRef(g21, i, 0, _loc(g21, i))], policy_version=6)
    lsn = j.begin_checkpoint(step=CHECKPOINT_STEP)
    j.commit_checkpoint(step=CHECKPOINT_STEP)
    dp.put(_loc(g21, 2))
    j.rollout_sealed([RolloutRef(g21, 2, 0, _loc(g21, 2))], policy_version=6)
    j.rollout_failed([RolloutRef(g21, 3, 0)], reason="timeout")
    j.close()  # sync="none": what is in the page cache is what a SIGKILL leaves
    return path, dp, (g20, g21, g22), lsn


def _rollouts(g):
    return [(r.index, r.attempt, r.sealed, r.locator) for r in g.rollouts]


def test_restore_keeps_the_sealed_rollouts_and_fences_the_rest(killed_run):
    path, dp, (g20, g21, g22), lsn = killed_run
    state = restore(path, data_plane=dp)
    assert (state.lsn, state.step) == (lsn, CHECKPOINT_STEP)
    (r21,) = state.admitted
    assert r21.group_id == g21 and r21.target_step == 8
    # 2 sealed (kept: rows in the data plane), 2 pending: rollout 2 with attempt 1 (the dead
    # run's 0 fenced); rollout 3 with attempt 2, since the dead run failed attempt 0 and may
    # have dispatched attempt 1 (attempts are never handed out twice)
    assert _rollouts(r21) == [(0, 0, True, _loc(g21, 0)), (1, 0, True, _loc(g21, 1)),
                              (2, 1, False, None), (3, 2, False, None)]
    assert [r.index for r in r21.pending] == [2, 3]
    assert [g.group_id for g in state.replay] == [g20] and len(state.replay[0].rollouts) == 4
    assert state.salvaged_rollouts == [] and state.lost_rollouts == []


def test_salvage_keeps_the_rollout_sealed_after_the_checkpoint(killed_run):
    path, dp, (g20, g21, g22), lsn = killed_run
    state = restore(path, data_plane=dp, salvage=True)
    (r21,) = state.admitted
    assert _rollouts(r21)[:3] == [(0, 0, True, _loc(g21, 0)), (1, 0, True, _loc(g21, 1)),
                                  (2, 0, True, _loc(g21, 2))]
    assert [(r.index, r.attempt) for r in r21.pending] == [(3, 2)]
    assert state.salvaged_rollouts == [(g21, 2)]


@pytest.mark.parametrize("salvage", [False, True])
def test_after_resume_a_late_seal_of_the_dead_run_is_rejected(killed_run, salvage):
    path, dp, (g20, g21, g22), lsn = killed_run
    state = restore(path, data_plane=dp, salvage=salvage)
    j = Journal.open(path, sync="none", resume=state)
    # the journal says what restore handed out: same rollouts, same attempts
    rec = j.state_copy().live[g21].rollouts
    (r21,) = state.admitted
    assert [(i, rec.attempts[i], rec.is_sealed(i), rec.locators[i]) for i in range(4)] == _rollouts(r21)
    # a worker of the dead run answers late with attempt 0 of a pending rollout: fenced
    index, current = r21.pending[0].index, r21.pending[0].attempt
    with pytest.raises(StaleAttempt) as info:
        j.rollout_sealed([RolloutRef(g21, index, 0, "tq/late")])
    assert (info.value.attempt, info.value.current, info.value.index) == (0, current, index)
    for r in r21.pending:  # the redispatched attempts seal, and the group finishes
        j.rollout_sealed([RolloutRef(g21, r.index, r.attempt, _loc(g21, r.index))], policy_version=7)
    j.finished([g21])
    assert j.owner_of(g21) == Owner.REPLAY
    j.close()
    first = next(iter(Reader(path).records(start_lsn=lsn + 1)))
    fences = [ev for ev in first.commit.events if type(ev) is RolloutFailed]
    # one round per step up: rollout 2 from 0 to 1; rollout 3 from 0 to 1 to 2
    raised = sorted((ref.group_id, ref.index, ref.attempt) for ev in fences for ref in ev.rollouts)
    assert raised == sorted((g21, r.index, a) for r in r21.pending for a in range(r.attempt))
    assert {ev.reason for ev in fences} == {"abandoned_on_restore"}


def test_restoring_the_same_checkpoint_twice_never_hands_out_an_attempt_again(killed_run):
    """The resumed run dispatched attempt 1 and died too: the next restore of the same
    checkpoint must not hand attempt 1 out again (that run's worker may still answer)."""
    path, dp, (g20, g21, g22), lsn = killed_run
    first = restore(path, data_plane=dp)
    Journal.open(path, sync="none", resume=first).close()          # ... and that run is killed
    (r21,) = first.admitted
    second = restore(path, data_plane=dp)
    (again,) = second.admitted
    assert second.lsn == first.lsn == lsn
    for before, now in zip(r21.pending, again.pending):
        assert now.index == before.index and now.attempt > before.attempt
    j = Journal.open(path, sync="none", resume=second)
    late = r21.pending[0]
    with pytest.raises(StaleAttempt):   # the first resumed run's worker answers late
        j.rollout_sealed([RolloutRef(g21, late.index, late.attempt, "tq/late")])
    j.close()


def test_a_rollout_whose_row_was_lost_regenerates_under_a_fresh_id(killed_run):
    path, dp, (g20, g21, g22), lsn = killed_run
    del dp.rows[_loc(g21, 1)]   # the data plane lost one sealed rollout's row
    del dp.rows[_loc(g20, 3)]   # and one of a finished group's
    state = restore(path, data_plane=dp)
    assert sorted(state.lost_rollouts) == sorted([(g21, 1), (g20, 3)])
    by_old = {g.replaces: g for g in state.demoted}
    assert set(by_old) == {g20, g21}
    new21 = by_old[g21]
    assert new21.group_id > g22 and new21.owner == Owner.ADMITTED and new21.target_step == 8
    assert [(r.index, r.sealed) for r in new21.rollouts] == [(0, True), (1, False), (2, False), (3, False)]
    assert all(r.attempt == 0 for r in new21.rollouts)
    assert state.replay == []
    j = Journal.open(path, sync="none", resume=state)
    assert j.owner_of(g21) == j.owner_of(g20) == Owner.DROPPED
    rec = j.state_copy().live[new21.group_id].rollouts
    assert rec.is_sealed(0) and rec.locators[0] == _loc(g21, 0) and not rec.is_sealed(1)
    with pytest.raises(OwnershipError, match="DROPPED"):  # the old group's workers are fenced too
        j.rollout_sealed([RolloutRef(g21, 2, 0, "x")])
    j.close()


def test_a_late_result_after_its_retry_sealed_is_stale_not_a_double_seal(tmp_path):
    """The usual late result: the retry (attempt 1) sealed first, then attempt 0 answers."""
    with Journal.open(str(tmp_path / "j"), sync="none") as j:
        (g,) = j.taken([GroupRef(idx=1)])
        j.admitted([g], target_step=1, rollouts=2)
        j.rollout_failed([RolloutRef(g, 0, 0)], reason="deadline")
        j.rollout_sealed([RolloutRef(g, 0, 1, "row-a1")])
        with pytest.raises(StaleAttempt) as info:
            j.rollout_sealed([RolloutRef(g, 0, 0, "row-a0")])
        assert (info.value.attempt, info.value.current) == (0, 1)
        with pytest.raises(OwnershipError, match="already sealed") as again:  # the same attempt twice
            j.rollout_sealed([RolloutRef(g, 0, 1, "row-a1")])
        assert not isinstance(again.value, StaleAttempt)


@pytest.mark.parametrize("salvage", [False, True])
@pytest.mark.parametrize("owner", ["reserved", "spare"])
def test_a_group_waiting_at_the_checkpoint_that_a_dead_run_admitted_comes_back_under_a_fresh_id(
        tmp_path, salvage, owner):
    """g22 waits at the checkpoint (RESERVED, or SPARE); the dead run admits it after the
    checkpoint, and its workers hold attempt 0 of every rollout. Admitted again under the same
    id, attempt 0 would be handed out twice: a late answer of the dead run would seal, and its
    row would sit where the new attempt 0 puts its own. It comes back under a fresh id."""
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    j = Journal.open(path, sync="none")
    (g22,) = j.taken([GroupRef(idx=22)], loader_state={"pos": 1})
    if owner == "spare":
        j.diverted([g22])
    j.begin_checkpoint(step=CHECKPOINT_STEP)
    j.commit_checkpoint(step=CHECKPOINT_STEP)
    j.admitted([g22], target_step=7, policy_version=CHECKPOINT_STEP + 1, rollouts=2)
    j.close()  # killed: a worker of this run generates (g22, 0, attempt 0)

    state = restore(path, data_plane=dp, salvage=salvage)
    # without salvage it comes back where it was; with it, as the dead run admitted it (its
    # rollouts at attempt 0 of the fresh id, which nothing ever dispatched)
    waiting = state.reserved if owner == "reserved" else state.spare
    (back,) = state.admitted if salvage else waiting
    assert back.idx == 22 and back.group_id > g22
    assert [g.group_id for g in state.reissued] == [back.group_id]
    j = Journal.open(path, sync="none", resume=state)
    assert j.owner_of(g22) == Owner.DROPPED
    assert j.owner_of(back.group_id) == (Owner.ADMITTED if salvage else
                                         Owner.RESERVED if owner == "reserved" else Owner.SPARE)
    with pytest.raises(OwnershipError):   # the dead run's late answer names the old id
        j.rollout_sealed([RolloutRef(g22, 0, 0, "tq/late")])
    if salvage:
        assert [(r.index, r.attempt, r.sealed) for r in back.rollouts] == [(0, 0, False), (1, 0, False)]
        assert back.target_step == 7
    else:
        j.admitted([back.group_id], target_step=7, policy_version=CHECKPOINT_STEP, rollouts=2)
    j.close()
    # restored again (the new admission died too): the fresh id keeps its fences
    again = restore(path, data_plane=dp, salvage=salvage)
    (back2,) = again.groups
    assert back2.idx == 22 and back2.group_id not in (g22, back.group_id)
    assert back2.owner == (Owner.ADMITTED if salvage else Owner.RESERVED if owner == "reserved" else Owner.SPARE)
