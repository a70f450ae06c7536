"""The example trainer's rollout-level ownership, in-process: after a restore it dispatches
only the pending rollouts with the attempts restore gives them (sealed ones are read back
from the data plane), and a slow worker's late result is rejected by the journal, its row
deleted and counted; in Ray mode group-level, an actor's row joins its group's rows."""

from __future__ import annotations

import asyncio
import os
import random

import pytest
import torch

from journal import GroupRef, Journal, Reader, RolloutRef
from replay import LocalDataPlane, fingerprint

from examples.trainer import (ADMITTED, REPLAY, RUN_IDENTITY, Config, NoOwnership, Trainer, _rollout_row,
                              step_dir)


def _close(t: Trainer) -> None:
    t.compactor.close()
    t.journal.close()
    t.gc_pool.shutdown(wait=True)
    t.ledger.close()


@pytest.fixture
def trainer(tmp_path):
    made = []

    def make(**kw) -> Trainer:
        t = Trainer(Config(out=str(tmp_path), dataset_size=8, batch_size=1, rollouts=4, **kw))
        made.append(t)
        return t
    yield make
    for t in made:
        if t.journal is not None:
            _close(t)


def test_restore_dispatches_only_the_pending_rollouts_with_their_attempts(trainer, capsys):
    t = trainer()
    cfg, ds = t.cfg, t.ds
    j = Journal.open(cfg.journal_dir, identity=RUN_IDENTITY)  # the trainer's run: restore checks it
    (g,) = j.taken([GroupRef(idx=5, task_name=ds[5]["task_name"], epoch=0, fingerprint=fingerprint(ds[5]))],
                   loader_state=t.dl.state_dict(), dataset_size=len(ds))
    j.admitted([g], target_step=2, policy_version=1, rollouts=4)
    loc = t.dp.put_rollout(g, 2, 0, _rollout_row((1, -0.5, 1.0), 0.25, 1))
    j.rollout_sealed([RolloutRef(g, 2, 0, loc)], policy_version=1)
    j.rollout_failed([RolloutRef(g, 0, 0)], reason="deadline")
    lsn = j.begin_checkpoint(step=1)
    os.makedirs(step_dir(cfg.ckpt_dir, 1))
    torch.save({"model": t.policy.state_dict(), "optim": t.opt.state_dict(), "step": 1, "loader_epoch": 0,
                "lsn": lsn}, os.path.join(step_dir(cfg.ckpt_dir, 1), "model.pt"))
    j.commit_checkpoint(step=1)
    j.close()

    (w, todo), = t._start_journal()
    # rollout 2 is kept; 0 (failed once) and 1, 3 regenerate with the attempt after the
    # dead run's, so a worker of the dead run cannot seal
    assert w.gid == g and todo == [(0, 2), (1, 1), (3, 1)]
    assert w.attempts == [2, 1, 0, 1] and w.sealed == [None, None, loc, None] and w.done == 1
    assert (int(w.answers[2]), float(w.rewards[2]), float(w.seconds[2])) == (1, 1.0, 0.25)
    assert "regenerated=3" in capsys.readouterr().out.split("RESUMED", 1)[1]


def test_a_late_result_is_rejected_by_the_journal_and_its_row_deleted(trainer):
    t = trainer()

    async def scenario():
        t.jobs, t.events = asyncio.Queue(), asyncio.Queue()
        t._start_journal()
        t._snapshot_policy()
        (w,) = await t._take()
        await t._admit([w], 1)
        while not t.jobs.empty():
            t.jobs.get_nowait()
        result = t._generate(w, random.Random(0))
        # rollout 1: given up at its deadline, its late result comes while attempt 1 runs
        await t._give_up(w, 1, 0, "deadline")
        assert w.attempts[1] == 1 and t.jobs.get_nowait() == (w, 1, 1)
        await t._late(w, 1, 0, result, 0.2, w.policy_version)
        # rollout 2: given up, its next attempt seals first, then the late result comes
        await t._give_up(w, 2, 0, "deadline")
        r = t._rollout(w, 2)
        r.advance(r.length)
        await t._deliver(w, 2, 1, result, 0.01, r)
        await t._late(w, 2, 0, result, 0.3, w.policy_version)
        return w

    w = asyncio.run(scenario())
    assert t.stats["fenced_late_results"] == 2
    # both by the attempt fence, also the one whose retry had sealed first
    assert (t.stats["fenced_stale_attempt"], t.stats["fenced_already_done"]) == (2, 0)
    # the late rows are gone, the sealed one of attempt 1 stays
    rows = sorted(LocalDataPlane(t.cfg.rows_dir).locators())
    assert rows == [f"g{w.gid}-r2-a1.rows"] and w.sealed[2] == rows[0]
    # the journal holds the raised attempts and the one seal
    r = Reader(t.cfg.journal_dir).fold().live[w.gid].rollouts
    assert r.attempts == (0, 1, 1, 0) and r.locators == (None, None, rows[0], None)


class _AckingPool:
    """The one part of the Ray actor pool an answer needs: acknowledging a handled result."""

    def ack(self, held, group_id: int, index: int, attempt: int) -> None:
        pass


def test_ray_mode_group_level_keeps_each_actors_row_with_its_group(trainer):
    # the baseline (no journal) is group-level: an actor's answer joins its group's result
    # slots, the actor's row goes, and the group's rows are written once all are in
    t = trainer(baseline=True, ray=True)
    t.own, t.pool = NoOwnership(), _AckingPool()

    async def scenario():
        t.jobs, t.events = asyncio.Queue(), asyncio.Queue()
        t._snapshot_policy()
        (w,) = await t._take()
        await t._admit([w], 1)
        locs = []
        for i in range(4):
            locs.append(t.dp.put_rollout(w.gid, i, 0, _rollout_row((i, -0.5, float(i % 2)), 0.25, 0)))
            answered = asyncio.get_running_loop().create_future()
            answered.set_result({"locator": locs[-1], "handover": []})
            assert w.status == ADMITTED
            await t._ray_answer(0, ("actor-0", None), w, i, 0, answered, 0.25, late=False)
        return w, locs, t.events.get_nowait()

    w, locs, event = asyncio.run(scenario())
    assert event == ("finished", w) and w.status == REPLAY and w.attempts is None
    assert not any(t.dp.has(loc) for loc in locs)
    assert list(LocalDataPlane(t.cfg.rows_dir).locators()) == [w.locator]
    assert t.dp.get(w.locator)["answers"].tolist() == [0, 1, 2, 3]
    assert t.dp.get(w.locator)["rewards"].tolist() == [0.0, 1.0, 0.0, 1.0]
    t.gc_pool.shutdown(wait=True)
    t.ledger.close()
