"""The minimal trainer (`examples/minimal_trainer.py`) on `AsyncSession`, for a trainer that
runs in an event loop: the rollouts of a whole batch generate concurrently, and the commits
awaited while an fsync runs share the next one.

    python -m examples.minimal_async_trainer RUN_DIR [--steps N]
"""

import argparse
import asyncio

import torch

from replay import AsyncSession

from .minimal_trainer import BATCH, CKPT_EVERY, LR, ROLLOUTS, generate, in_flight, open_session, \
    resumed_line, save_weights, update


async def rollout(s, model, gid, x, r, step):
    """Generate one rollout with the weights of `step` until an attempt succeeds, then seal it."""
    attempt = r.attempt
    while (rows := generate(model, x, gid, r.index, attempt)) is None:
        attempt = await s.fail(gid, r.index, attempt, reason="generation failed")
        await asyncio.sleep(0)   # other rollouts go on meanwhile
    await s.seal(gid, r.index, attempt, rows, policy_version=step)


async def train(run_dir, steps):
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    async with await open_session(run_dir, model, AsyncSession) as s:
        step, batches = s.step or 0, s.batches()
        ready, todo, fresh = in_flight(s)
        if fresh:
            await s.admit(fresh, step=step + 1, policy_version=step, rollouts=ROLLOUTS)
        print(resumed_line(s, step, ready, todo), flush=True)
        while step < steps:
            while len(ready) + len(todo) < 2 * BATCH:   # a step's groups admitted ahead
                batch = next(batches)
                gids = await s.take(batch)
                await s.admit(gids, step=step + 1 + (len(ready) + len(todo)) // BATCH, policy_version=step,
                              rollouts=ROLLOUTS)
                todo += list(zip(gids, batch["x"]))
            n = max(0, BATCH - len(ready))   # generate what the next step lacks, all at once
            group, todo = todo[:n], todo[n:]
            await asyncio.gather(*(rollout(s, model, g, x, r, step) for g, x in group for r in s.pending(g)))
            ready += [g for g, _ in group]
            group, ready, step = ready[:BATCH], ready[BATCH:], step + 1
            rows = [r for g in group for r in await s.rows(g)]
            loss = update(model, opt, rows)
            await s.trained(group, step=step)   # once the optimizer step that used their rows is done
            print(f"step {step} epoch {s.epoch} loss {loss:.3f}", flush=True)
            if step % CKPT_EVERY == 0 or step == steps:
                await s.checkpoint(step, save=lambda: save_weights(run_dir, model, step))
    print(f"done at step {step}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m examples.minimal_async_trainer")
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=40, help="train until this step (default 40)")
    args = p.parse_args(argv)
    asyncio.run(train(args.run_dir, args.steps))


if __name__ == "__main__":
    main()
