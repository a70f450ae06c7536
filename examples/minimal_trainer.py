"""The smallest complete trainer on the ownership journal's session: copy it and adapt it.

    python -m examples.minimal_trainer RUN_DIR [--steps N]

Kill it at any moment (kill -9 too) and start it again with the same RUN_DIR: it resumes at
its latest committed checkpoint, and every prompt is trained exactly once. A first start and a
restart run the same code. The numbered comments are the three steps of README "Integrate it":
open, loop, checkpoint. RUN_DIR holds journal/ (the ownership journal), rows/ (the data plane:
rollouts of groups not trained yet) and ckpt/step_N.pt (weights). It ends at step N
(`--steps`; `s.batches()` alone never ends), with a checkpoint there; run again, it restores that
step and trains nothing more. What it prints marks the moments worth a kill (docs/testing.md):
`resumed at step N ...` once `Session.open` returned, `step N ...` after each training step,
`checkpoint N saving` inside a checkpoint (begun, not committed yet).
`examples/minimal_async_trainer.py` is the same trainer on `AsyncSession`.
"""

import argparse
import os
import random

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from replay import LocalDataPlane, Session, durable_file

BATCH, ROLLOUTS, CKPT_EVERY, FAILURE_RATE, LR = 4, 4, 5, 0.05, 0.005
# your dataset: any map-style dataset whose dataset[idx] is the same row in every process
DATASET = [{"idx": i, "task_name": ("sum", "double")[i % 2], "x": float(i % 9)} for i in range(48)]


def collate(rows):   # the loader's collate_fn; restore also calls it with one row per group
    return {"idx": [r["idx"] for r in rows], "task_name": [r["task_name"] for r in rows],
            "x": torch.tensor([r["x"] for r in rows])}


def generate(model, x, gid, index, attempt):
    """Your rollout: one sample of the policy for prompt x, or None when generation failed."""
    if random.Random(f"{gid}-{index}-{attempt}").random() < FAILURE_RATE:
        return None
    with torch.no_grad():
        return {"x": x, "target": 2 * x + 1, "y": model(x.view(1, 1)).view(()) + 0.1 * torch.randn(())}


def update(model, opt, rows):
    """Your training step on the rows of a batch of groups; returns the loss."""
    loss = sum((model(r["x"].view(1, 1)).view(()) - r["target"]) ** 2 for r in rows) / len(rows)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def weights_path(run_dir, step):
    return os.path.join(run_dir, "ckpt", f"step_{step}.pt")


def save_weights(run_dir, model, step):   # durably, for the checkpoint of `step`
    print(f"checkpoint {step} saving", flush=True)
    with durable_file(weights_path(run_dir, step)) as f:
        torch.save(model.state_dict(), f)
    # a restore loads the last committed checkpoint's weights (step - CKPT_EVERY until this one
    # commits, then these): those of the checkpoint before it are never loaded again
    if os.path.exists(weights_path(run_dir, step - 2 * CKPT_EVERY)):
        os.unlink(weights_path(run_dir, step - 2 * CKPT_EVERY))


def open_session(run_dir, model, session=Session):   # an AsyncSession's open is awaited
    """1. Open: restore the latest committed checkpoint, its weights and the loader position."""
    loader = StatefulDataLoader(DATASET, batch_size=BATCH, shuffle=True, collate_fn=collate,
                                generator=torch.Generator().manual_seed(0))
    return session.open(os.path.join(run_dir, "journal"), dataset=DATASET, loader=loader,
                        collate_fn=collate, data_plane=LocalDataPlane(os.path.join(run_dir, "rows")),
                        load_weights=lambda step: model.load_state_dict(
                            torch.load(weights_path(run_dir, step), weights_only=True)))


def in_flight(s):
    """2. What the restored checkpoint had in flight, and what the crashed run took after it
    (adopted): groups to train (finished), groups to generate (the unsealed rollouts of admitted
    ones, and the taken ones to admit first)."""
    ready = [w.group_id for w in s.resume_work if w.kind == "train"]
    todo = [(w.group_id, w.prompt["x"][0]) for w in s.resume_work if w.kind != "train"]
    return ready, todo, [w.group_id for w in s.resume_work if w.kind == "admit"]


def resumed_line(s, step, ready, todo):
    restored = s.stats()["restored"]
    return (f"resumed at step {step} train {len(ready)} generate {len(todo)} adopted {restored['adopted']} "
            f"kept {restored['rollouts_adopted']}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m examples.minimal_trainer")
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=40, help="train until this step (default 40)")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with open_session(args.run_dir, model) as s:
        step, batches = s.step or 0, s.batches()
        ready, todo, fresh = in_flight(s)
        if fresh:   # generated by the weights of `step` (the policy version the salvage rule reads)
            s.admit(fresh, step=step + 1, policy_version=step, rollouts=ROLLOUTS)
        print(resumed_line(s, step, ready, todo), flush=True)
        while step < args.steps:
            while len(ready) + len(todo) < 2 * BATCH:   # 2. the loop: keep a step's groups admitted ahead
                batch = next(batches)
                gids = s.take(batch)
                s.admit(gids, step=step + 1 + (len(ready) + len(todo)) // BATCH, policy_version=step,
                        rollouts=ROLLOUTS)
                todo += list(zip(gids, batch["x"]))
            while len(ready) < BATCH:   # generate and seal each rollout
                gid, x = todo.pop(0)
                for r in s.pending(gid):   # each unsealed rollout, with the attempt to run
                    attempt = r.attempt
                    while (rows := generate(model, x, gid, r.index, attempt)) is None:
                        attempt = s.fail(gid, r.index, attempt, reason="generation failed")
                    s.seal(gid, r.index, attempt, rows, policy_version=step)   # durable rows, then the seal
                ready.append(gid)
            group, ready, step = ready[:BATCH], ready[BATCH:], step + 1
            rows = [r for g in group for r in s.rows(g)]
            loss = update(model, opt, rows)
            s.trained(group, step=step)   # once the optimizer step that used their rows is done
            print(f"step {step} epoch {s.epoch} loss {loss:.3f} stats {s.stats()}", flush=True)   # log it
            if step % CKPT_EVERY == 0 or step == args.steps:   # 3. checkpoint: the journal commits it
                s.checkpoint(step, save=lambda: save_weights(args.run_dir, model, step))
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main()
