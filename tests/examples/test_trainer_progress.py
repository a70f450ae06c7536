"""The example trainer continues rollouts from their durable prefix after a restore: a
single-turn and a multi-turn rollout whose progress a run recorded before its checkpoint come
back with the prefix; the next attempt starts at the tokens (and the turn, with the
environment's state) the prefix reached, and its sealed row's trace is the prefix followed by
the tokens generated after the restore: the tokens the uninterrupted rollout makes."""

from __future__ import annotations

import asyncio
import os
import random

import pytest
import torch

from journal import GroupRef, Journal, Reader, RolloutProgress, RolloutRef, RolloutSealed
from replay import fingerprint

from examples.environments import Notebook, environment_for
from examples.generation import LENGTH_MEDIAN, TURN_TOKENS, Rollout, rollout_key, rollout_length
from examples.trainer import RUN_IDENTITY, Config, TinyPolicy, Trainer, step_dir

SINGLE, MULTI = 4, 5          # dataset indexes: no environment, the Notebook (export/restore)


def _close(t: Trainer) -> None:
    t.compactor.close()
    t.journal.close()
    t.gc_pool.shutdown(wait=True)
    t.ledger.close()


@pytest.fixture
def trainer(tmp_path):
    t = Trainer(Config(out=str(tmp_path), dataset_size=8, batch_size=1, rollouts=2, failure_rate=0.0,
                       slow_rate=0.0, progress_every=4))
    yield t
    if t.journal is not None:
        _close(t)


def _rollout(t: Trainer, idx: int, index: int) -> Rollout:
    key = (t.cfg.seed, 0, idx, index)
    return Rollout.start(t.policy, torch.tensor(t.ds[idx]["tokens"]), idx, rollout_key(*key), rollout_length(*key),
                         environment_for(idx), version=1)


def _long_index(t: Trainer, idx: int) -> int:
    """A rollout index of the prompt at `idx` long enough for a prefix of 2 turns and more."""
    return next(i for i in range(512) if rollout_length(t.cfg.seed, 0, idx, i) > 3 * TURN_TOKENS)


def _crashed_run(t: Trainer, index: dict) -> dict:
    """A run that admitted one group per prompt, recorded a prefix of 2 turns' tokens of one
    rollout each, committed its step-1 checkpoint and died. Returns gid -> the prefix row."""
    cfg, ds = t.cfg, t.ds
    j = Journal.open(cfg.journal_dir, identity=RUN_IDENTITY)
    refs = [GroupRef(idx=i, task_name=ds[i]["task_name"], epoch=0, fingerprint=fingerprint(ds[i]))
            for i in (SINGLE, MULTI)]
    gids = j.taken(refs, loader_state=t.dl.state_dict(), dataset_size=len(ds))
    rows = {}
    for gid, idx in zip(gids, (SINGLE, MULTI)):
        j.admitted([gid], target_step=2, policy_version=1, rollouts=max(index.values()) + 1)
        r = _rollout(t, idx, index[idx])
        r.advance(2 * TURN_TOKENS)
        r.us = 777
        rows[gid] = r.progress_row()
        loc = t.dp.put_progress(gid, index[idx], 0, 1, rows[gid])
        j.rollout_progress(RolloutRef(gid, index[idx], 0, loc), tokens=r.generated, turn=r.turn, policy_version=1)
    lsn = j.begin_checkpoint(step=1)
    os.makedirs(step_dir(cfg.ckpt_dir, 1))
    torch.save({"model": t.policy.state_dict(), "optim": t.opt.state_dict(), "step": 1, "loader_epoch": 0,
                "lsn": lsn}, os.path.join(step_dir(cfg.ckpt_dir, 1), "model.pt"))
    j.commit_checkpoint(step=1)
    j.close()
    return rows


def test_a_restored_rollout_continues_at_its_prefix_turn_and_environment_state(trainer, capsys):
    t = trainer
    index = {SINGLE: _long_index(t, SINGLE), MULTI: _long_index(t, MULTI)}
    saved = _crashed_run(t, index)
    before = {idx: _rollout(t, idx, index[idx]) for idx in index}
    for r in before.values():
        r.advance(2 * TURN_TOKENS)

    redispatch = t._start_journal()
    t._snapshot_policy()
    assert "continued=2" in capsys.readouterr().out.split("RESUMED", 1)[1]
    by_idx = {w.idx: (w, todo) for w, todo in redispatch}
    for idx, (w, todo) in by_idx.items():
        i = index[idx]
        assert (i, 1) in todo and w.progress[i] is not None
        w.policy_version = t.step
        r = t._rollout(w, i)
        # the prefix's tokens, turn and environment state, not a fresh start
        assert r.trace == saved[w.gid]["trace"].tolist() and r.generated == 2 * TURN_TOKENS and r.us == 777
        if idx == MULTI:
            assert r.turn == 2 and isinstance(r.env, Notebook)
            assert r.env.total == before[idx].env.total and torch.equal(r.env.notes, before[idx].env.notes)
        else:
            assert r.turn is None and r.env is None

    async def generate():
        t.jobs, t.events = asyncio.Queue(), asyncio.Queue()
        for idx, (w, _) in by_idx.items():
            await t._roll(w, index[idx], 1, random.Random(0))

    asyncio.run(generate())
    fold = Reader(t.cfg.journal_dir).fold()
    for idx, (w, _) in by_idx.items():
        i = index[idx]
        loc = w.sealed[i]
        assert loc is not None and fold.live[w.gid].rollouts.locators[i] == loc
        trace = t.dp.get(loc)["trace"].tolist()
        prefix = saved[w.gid]["trace"].tolist()
        whole = _rollout(t, idx, i)
        whole.advance(whole.length)
        assert trace[:len(prefix)] == prefix and len(trace) > len(prefix)
        assert trace == whole.trace
        # its seconds count the prefix's generation time too
        assert float(w.seconds[i]) == pytest.approx((777 + round((whole.length - 2 * TURN_TOKENS)
                                                             * t.cfg.latency_ms * 1000 / LENGTH_MEDIAN)) / 1e6, abs=1e-4)
    # under the new attempt: the resume's first commit recorded the prefix again, then the
    # continuation recorded progress of its own (every turn, or every K tokens)
    progress = {gid: [ev.tokens for rec in Reader(t.cfg.journal_dir).records() for ev in rec.commit.events
                      if type(ev) is RolloutProgress and ev.ref.attempt == 1 and ev.ref.group_id == gid]
                for gid in saved}
    assert all(tokens[0] == 2 * TURN_TOKENS and max(tokens) > 2 * TURN_TOKENS for tokens in progress.values())


def _crashed_after_checkpoint(t: Trainer, idx: int, index: int) -> dict:
    """A run that admitted one group at step 1 (weights 1), committed its step-1 checkpoint,
    then recorded a prefix of 2 turns' tokens generated by its weights of step 2 and died (the
    weights of step 2 died with it). Returns the prefix row."""
    cfg, ds = t.cfg, t.ds
    j = Journal.open(cfg.journal_dir, identity=RUN_IDENTITY)
    (gid,) = j.taken([GroupRef(idx=idx, task_name=ds[idx]["task_name"], epoch=0, fingerprint=fingerprint(ds[idx]))],
                     loader_state=t.dl.state_dict(), dataset_size=len(ds))
    j.admitted([gid], target_step=2, policy_version=1, rollouts=index + 1)
    lsn = j.begin_checkpoint(step=1)
    os.makedirs(step_dir(cfg.ckpt_dir, 1))
    torch.save({"model": t.policy.state_dict(), "optim": t.opt.state_dict(), "step": 1, "loader_epoch": 0,
                "lsn": lsn}, os.path.join(step_dir(cfg.ckpt_dir, 1), "model.pt"))
    j.commit_checkpoint(step=1)
    torch.manual_seed(2)
    dead = TinyPolicy().eval()   # the step-2 weights, never checkpointed
    key = (cfg.seed, 0, idx, index)
    r = Rollout.start(dead, torch.tensor(ds[idx]["tokens"]), idx, rollout_key(*key), rollout_length(*key),
                      environment_for(idx), version=2)
    r.advance(2 * TURN_TOKENS)
    row = r.progress_row()
    loc = t.dp.put_progress(gid, index, 0, r.generated, row)
    j.rollout_progress(RolloutRef(gid, index, 0, loc), tokens=r.generated, turn=r.turn, policy_version=2)
    j.close()
    return row


@pytest.mark.parametrize("lag", [0, 1])
def test_a_prefix_of_weights_that_died_is_continued_within_the_lag_bound_and_keeps_its_versions(tmp_path, lag):
    """--max-policy-lag 1: a restore to step 1 keeps the prefix the step-2 weights made, and the
    restored weights continue it: the sealed row's tokens are the prefix's (version 2, their
    log-probabilities under the dead weights) then the restored weights' (version 1), and the
    seal records the span, (1, 2). --max-policy-lag 0: the prefix is dropped, the rollout starts
    afresh with the restored weights."""
    t = Trainer(Config(out=str(tmp_path), dataset_size=8, batch_size=1, rollouts=2, failure_rate=0.0,
                       slow_rate=0.0, progress_every=4, max_policy_lag=lag))
    try:
        index = _long_index(t, MULTI)
        saved = _crashed_after_checkpoint(t, MULTI, index)
        ((w, todo),) = t._start_journal()
        t._snapshot_policy()
        w.policy_version = t.step
        assert t.step == 1 and (index, 1) in todo
        assert (w.prefix[index] is not None) == bool(lag)

        async def generate():
            t.jobs, t.events = asyncio.Queue(), asyncio.Queue()
            await t._roll(w, index, 1, random.Random(0))

        asyncio.run(generate())
        row = t.dp.get(w.sealed[index])
        versions = row["token_versions"].tolist()
        kept = 2 * TURN_TOKENS if lag else 0
        assert versions == [2] * kept + [1] * (len(versions) - kept) and len(versions) > kept
        assert row["token_logprobs"][:kept].tolist() == saved["token_logprobs"][:kept].tolist()
        seals = [ev for rec in Reader(t.cfg.journal_dir).records() for ev in rec.commit.events
                 if type(ev) is RolloutSealed and ev.rollouts[0].group_id == w.gid]
        # the seal spans the versions of its tokens: the prefix's 2 down to the restored weights' 1
        assert [(ev.policy_version, ev.since_version) for ev in seals] == [(2, 1) if lag else (1, None)]
    finally:
        _close(t)
