"""Test 1: the worked example of reference/rollout-recovery-ledger.txt, end to end.

Config: 4 rollouts per prompt group, generation runs one step ahead of the
trainer, the trainer is at step 7 (the checkpoint holds the weights after step
6). When the checkpoint lands:

| group | state                                | owner saved          | on restart                   |
| g20   | all 4 rollouts finished (step 7)     | replay buffer        | trained on directly          |
| g21   | 2 of 4 rollouts generating (step 8)  | ledger, ADMITTED     | redispatched for step 8      |
| g22   | taken, waiting at the gate           | ledger, RESERVED     | goes through admission again |
| g23   | still in the dataset                 | dataloader position  | served when the loader gets there |

The run goes on past the checkpoint (g20 trained, g21 finished, g22 admitted,
g23 taken) and is then killed. A real torchdata StatefulDataLoader is used
throughout, shuffled, so "g23" is whatever row the loader yields next.
"""

from __future__ import annotations

import pytest

from journal import Journal, Owner, Reader
from replay import restore
from tests.support.replay_support import (ROLLOUTS_PER_GROUP, FakeDataPlane, collate, locator_of,
                                          make_dataset, ref_of, run_group, stateful_loader)

CHECKPOINT_STEP = 6  # the weights after step 6: the trainer is at step 7

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def test_ledger_worked_example(tmp_path):
    path = str(tmp_path / "journal")
    ds = make_dataset(64)
    dp = FakeDataPlane()
    loader = stateful_loader(ds)
    it = iter(loader)

    j = Journal.open(path, sync="none")
    # warm-up: 20 groups (g0..g19) trained over steps 1..6
    for n in range(20):
        step = 1 + n * 6 // 20
        run_group(j, next(it), step=step, policy_version=step - 1, dp=dp, loader_state=loader.state_dict())

    def take() -> tuple[int, dict]:
        row = next(it)
        (gid,) = j.taken([ref_of(row)], loader_state=loader.state_dict())
        return gid, row

    g20, row20 = take()
    j.admitted([g20], target_step=7, policy_version=6)
    dp.put(locator_of(g20))                                  # all 4 rollouts finished
    j.finished([g20], policy_version=6, locators=[locator_of(g20)])
    g21, row21 = take()
    j.admitted([g21], target_step=8, policy_version=6)       # one step ahead
    dp.put(locator_of(g21), n=2)                             # 2 of 4 rollouts still generating
    g22, row22 = take()                                      # waiting at the gate
    assert (g20, g21, g22) == (20, 21, 22)
    checkpoint_lsn = j.begin_checkpoint(step=CHECKPOINT_STEP)
    j.commit_checkpoint(step=CHECKPOINT_STEP)

    # the run goes on past the checkpoint, then is SIGKILLed
    j.trained([g20], step=7)
    dp.put(locator_of(g21), n=2)
    j.finished([g21], policy_version=6, locators=[locator_of(g21)])
    j.admitted([g22], target_step=9, policy_version=7)
    g23, row23 = take()
    assert g23 == 23
    j.close()  # what is on disk is what a kill leaves (sync="none": the page cache is the disk)

    state = restore(path, dataset=ds, collate_fn=collate)
    assert (state.lsn, state.step) == (checkpoint_lsn, CHECKPOINT_STEP)
    # g20 -> replay: trained on directly, its 4 rollouts are in the data plane
    assert [g.group_id for g in state.replay] == [20]
    assert state.replay[0].owner == Owner.REPLAY and state.replay[0].locator == locator_of(20)
    assert len(dp.rows[state.replay[0].locator]) == ROLLOUTS_PER_GROUP
    # g21 -> admitted, redispatched for step 8 (all 4 rollouts regenerate: no salvage asked)
    assert [(g.group_id, g.target_step, g.policy_version) for g in state.admitted] == [(21, 8, 6)]
    # g22 -> reserved: goes through admission again, under a fresh id: the dead tail admitted
    # it, and its workers may hold attempt 0 of its rollouts (23 was handed out there too)
    assert [(g.group_id, g.target_step) for g in state.reserved] == [(24, None)]
    assert state.reissued == state.reserved
    assert state.spare == [] and not state.salvaged and not state.demoted
    # the prompts are rebuilt from the dataset rows the groups were taken from
    for g, row in ((state.replay[0], row20), (state.admitted[0], row21), (state.reserved[0], row22)):
        assert g.idx == row["idx"] and g.prompt == collate([row])
    assert state.counts == {"RESERVED": 1, "ADMITTED": 1, "REPLAY": 1, "SPARE": 0, "TRAINED": 20,
                            "DROPPED": 0}

    # g23 -> still the loader's: a fresh loader fed the restored state yields g23's row next
    fresh = stateful_loader(ds)
    fresh.load_state_dict(state.loader_state)
    it2 = iter(fresh)
    assert next(it2) == row23
    # ...and a loader restored at the wrong point (the end of the run) would not
    late = stateful_loader(ds)
    late.load_state_dict(restore(path, at="end").loader_state)
    assert next(iter(late)) != row23

    # the trainer resumes: redispatch g21 as-is, admit g22's row as g24, take g23's row again
    j = Journal.open(path, sync="none", resume=state)
    assert j.owner_of(21) == Owner.ADMITTED and j.owner_of(24) == Owner.RESERVED
    assert j.owner_of(22) == Owner.DROPPED and j.owner_of(20) == Owner.REPLAY
    j.admitted([24], target_step=8, policy_version=6)
    (g_new,) = j.taken([ref_of(row23)], loader_state=fresh.state_dict())
    assert g_new > 24  # 23 was handed out on the dead tail, 24 by the resume: never reused
    j.trained([20], step=7)
    j.close()

    # the dead tail of the killed run is still readable, and holds g23's take
    tails = list(Reader(path).dead_tails())
    assert len(tails) == 1
    timeline, branch_lsn, records = tails[0]
    assert branch_lsn == checkpoint_lsn
    taken_on_tail = [tg.group_id for rec in records for ev in rec.commit.events
                     if type(ev).__name__ == "Taken" for tg in ev.groups]
    assert taken_on_tail == [23]
