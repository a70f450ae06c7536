"""The end of a run and the calls a trainer makes by mistake: `batches(epochs=N)` ends after the
run's N-th pass (counted from the run's start, so a restart goes on to the end of the same
passes), a checkpoint of the step committed last with nothing trained since is already done
(the run's final checkpoint is safe to call again after a restart), and `trained` is refused,
writing nothing, for a step below a committed checkpoint's and while a begun checkpoint's
save() has failed, each naming what to do."""

from __future__ import annotations

import pytest

from replay import CheckpointUnsaved, SessionError, StepBeforeCheckpoint, audit

from tests.replay.test_session import DATASET, Run, _generate_batch, _step

PER_EPOCH = len(DATASET) // 2   # batches of two


def refused(s, error: type, match: str, call):
    """`call()` raises `error` (its message matching `match`) and writes nothing."""
    lsn = s.journal.lsn
    with pytest.raises(error, match=match):
        call()
    assert s.journal.lsn == lsn


def test_batches_ends_after_the_epochs_asked_for_counted_from_the_runs_start(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches(epochs=1)
        for t in range(1, 4):   # three batches of the first pass
            _step(s, batches, t)
        s.checkpoint(3, save=lambda: None)
    with run.open() as s:   # the restart goes on to the end of the first pass, then stops
        rest = [b["idx"] for b in s.batches(epochs=1)]
        assert len(rest) == PER_EPOCH - 3 and s.epoch == 1
    with run.open() as s:   # nothing taken since: the restart is back at batch 3, a pass and a half to go
        assert len(list(s.batches(epochs=2))) == PER_EPOCH - 3 + PER_EPOCH and s.epoch == 2
    with pytest.raises(SessionError, match=r"batches\(epochs=-1\)"):
        s.batches(epochs=-1)


def test_the_final_checkpoint_is_safe_to_call_again_after_a_restart(fast_tmp):
    """A run that trained its whole epoch and checkpointed its last step, run again: nothing
    to take, and the same final checkpoint returns the committed one (nothing trained since);
    after training more, that step is refused by the journal."""
    run = Run(fast_tmp)
    for _ in range(2):
        with run.open() as s:
            step = s.step or 0
            batches = s.batches(epochs=1)
            for batch in batches:
                step += 1
                gids = s.take(batch)
                s.admit(gids, step=step, rollouts=1)
                for g in gids:
                    s.seal(g, 0, s.pending(g)[0].attempt, {"g": g})
                s.trained(gids, step=step)
            lsn = s.checkpoint(step, save=lambda: None)
            assert s.checkpoint(step, save=lambda: None) == lsn   # again: already done
    assert step == PER_EPOCH and audit(run.jdir).totals["trained_once"] == len(DATASET)


def test_trained_below_a_committed_checkpoints_step_is_refused(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        _step(s, batches, 1)
        _step(s, batches, 2)
        s.checkpoint(3, save=lambda: None)   # a trainer whose checkpoints count otherwise
        gids = _generate_batch(s, batches, 3)
        refused(s, StepBeforeCheckpoint, r"trained\(step=2\) .*checkpoint of step 3 is committed.*above 3",
                lambda: s.trained(gids, step=2))
        s.trained(gids, step=3)   # the checkpoint's own step: a checkpoint taken before step 3 trained


def test_trained_after_a_failed_save_is_refused_until_the_checkpoint_is_saved_again(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        _step(s, batches, 1)
        s.checkpoint(1, save=lambda: None)
        _step(s, batches, 2)

        def broken():
            raise OSError("No space left on device")
        with pytest.raises(OSError):
            s.checkpoint(2, save=broken)
        gids = _generate_batch(s, batches, 3)
        refused(s, CheckpointUnsaved, r"trained\(step=3\).*step-2 checkpoint begun at LSN \d+ failed to save"
                r".*s\.checkpoint\(2, save=\.\.\.\) again.*restart", lambda: s.trained(gids, step=3))
        refused(s, CheckpointUnsaved, r"checkpoint\(3\).*s\.checkpoint\(2, save=\.\.\.\) again",
                lambda: s.checkpoint(3, save=lambda: None))
        s.checkpoint(2, save=lambda: None)   # saved again: committed
        s.trained(gids, step=3)
        s.checkpoint(3, save=lambda: None)
    assert audit(run.jdir).clean


def test_an_async_session_refuses_and_checkpoints_again_alike(fast_tmp):
    import asyncio

    from tests.replay.test_async_session import _open

    async def run():
        async with await _open(fast_tmp) as s:
            batches = s.batches(epochs=1)
            gids = await s.take(next(batches))
            await s.admit(gids, step=1, rollouts=1)
            for g in gids:
                await s.seal(g, 0, 0, {"g": g})
            await s.trained(gids, step=1)
            lsn = await s.checkpoint(1, save=lambda: None)
            assert await s.checkpoint(1, save=lambda: None) == lsn
            gids = await s.take(next(batches))
            with pytest.raises(StepBeforeCheckpoint, match=r"trained\(step=0\)"):
                await s.trained(gids, step=0)
            assert list(batches) == []   # one pass of two batches: done
    asyncio.run(run())
