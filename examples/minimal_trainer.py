"""The smallest complete trainer that embeds the ownership journal: copy it and adapt it.

    python -m examples.minimal_trainer RUN_DIR [--steps N]

Kill it at any moment (kill -9 too) and start it again with the same RUN_DIR: it resumes at
its latest committed checkpoint, and every prompt is trained exactly once or dropped with a
reason. A first start and a restart run the same code. README "Integrate it into your
trainer" walks through it; the numbered comments below are its steps. RUN_DIR holds
journal/ (the ownership journal), ckpt/step_N.pt (weights) and rows/ (the data plane:
`replay.LocalDataPlane`).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random

import torch

from journal import DEFAULT_FS, GroupRef, Journal
from replay import LocalDataPlane, fingerprint, restore
from snapshot import compact

from .loader import stateful_loader

BATCH, CKPT_EVERY, COMPACT_EVERY, FAILURE_RATE, LR = 4, 5, 10, 0.05, 0.005
# your dataset: any map-style dataset whose dataset[idx] is the same row in every process
DATASET = [{"idx": i, "task_name": ("sum", "double")[i % 2], "x": float(i % 9)} for i in range(48)]


def collate(rows):   # the loader's collate_fn; restore also calls it with one row per group
    return {"idx": [r["idx"] for r in rows], "task_name": [r["task_name"] for r in rows],
            "x": torch.tensor([r["x"] for r in rows])}


def weights_path(run_dir, step):
    return os.path.join(run_dir, "ckpt", f"step_{step}.pt")


def saved_steps(run_dir):
    names = os.listdir(os.path.join(run_dir, "ckpt"))
    return sorted(int(n[5:-3]) for n in names if n.startswith("step_") and n.endswith(".pt"))


def save_weights(path, obj):
    """Durably and atomically: a temporary file, fsync, rename, fsync of the directory."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path + ".tmp")
    with open(path + ".tmp", "rb+") as f:
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    DEFAULT_FS.fsync_dir(os.path.dirname(path))


def generate(model, gid, x):
    """Your rollouts: 4 samples of the policy for prompt x, or None when generation failed."""
    if random.Random(gid).random() < FAILURE_RATE:   # group ids are never reused: deterministic
        return None
    with torch.no_grad():
        samples = model(x.view(1, 1)).view(1) + 0.1 * torch.randn(4)
    return {"x": x, "target": 2 * x + 1, "samples": samples}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m examples.minimal_trainer")
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=40, help="train until this step (default 40)")
    args = p.parse_args(argv)
    jdir, ds = os.path.join(args.run_dir, "journal"), DATASET
    gen = torch.Generator().manual_seed(0)
    dl = stateful_loader(ds, batch_size=BATCH, shuffle=True, generator=gen, collate_fn=collate)
    dp = LocalDataPlane(os.path.join(args.run_dir, "rows"))
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)

    # 1. Restore the state of the latest committed checkpoint (empty on a first start).
    state = restore(jdir, dataset=ds, collate_fn=collate, data_plane=dp, salvage=True)
    step, epoch = 0, 0
    if state.step is not None:   # 2. the weights of *that* step, not the newest file on disk
        path = weights_path(args.run_dir, state.step)
        if not os.path.exists(path):
            raise SystemExit(f"{path} is missing, but the journal {jdir} restores its committed "
                             f"step {state.step}: put the file back (weights go only after a commit)")
        ck = torch.load(path, weights_only=True)
        if ck["lsn"] != state.lsn:
            raise SystemExit(f"{path} was saved at LSN {ck['lsn']}, the journal {jdir} restores "
                             f"step {state.step} at LSN {state.lsn}")
        model.load_state_dict(ck["model"])
        step, epoch = state.step, ck["epoch"]   # the loader's epoch travels with the weights
    if state.loader_state is not None:   # 3. the state_dict() the last `taken` before it carried
        dl.load_state_dict(state.loader_state)
    j = Journal.open(jdir, resume=state)  # 4. continue the history at state.lsn: always resume=
    row_of = {g.group_id: g.locator for g in state.replay}   # the rows of finished groups
    dp.delete(set(dp.locators()) - set(row_of.values()))   # rows no restore can ask for any more
    # 5. In-flight work, after open (a resume can move a group to a fresh id). Each group's
    # prompt is collate([ds[idx]]), checked against the journal; g.epoch is its loader pass.
    prompts = {g.group_id: g.prompt["x"][0] for g in state.groups}
    ready = [g.group_id for g in state.replay]           # finished, rows in the data plane: train
    admitted = [g.group_id for g in state.admitted]      # generation was lost: generate again
    reserved = [g.group_id for g in state.reserved]      # taken, never admitted: admit them
    spares = [g.group_id for g in state.spare]           # back into the replacement pool
    print(f"resumed at step {step} lsn {state.lsn}: replay {len(ready)} admitted {len(admitted)} "
          f"reserved {len(reserved)} spare {len(spares)}", flush=True)

    def batches(first):   # (epoch, batch) from where the loader stands, pass after pass
        for e in itertools.count(first):
            yield from ((e, b) for b in dl)

    loader = batches(epoch)

    def take(divert=False):
        """6a. Loader -> journal: the locators and the loader's state_dict() *after* next()."""
        nonlocal epoch
        epoch, b = next(loader)
        refs = [GroupRef(idx=i, task_name=t, epoch=epoch, fingerprint=fingerprint(ds[i]))
                for i, t in zip(b["idx"], b["task_name"])]
        with j.transaction() as tx:   # one atomic commit
            gids = tx.taken(refs, loader_state=dl.state_dict(), dataset_size=len(ds))
            if divert:
                tx.diverted(gids)     # into the spare pool
        prompts.update(zip(gids, b["x"]))
        return gids

    trained_rows = []   # data-plane rows of groups trained since the last checkpoint
    while step < args.steps:
        t = step + 1
        while len(ready) < BATCH:
            if not admitted:   # 6b. admission: reserved groups first, then new ones
                reserved = reserved or take()
                gids, reserved = reserved[:BATCH - len(ready)], reserved[BATCH - len(ready):]
                j.admitted(gids, target_step=t, policy_version=step)
                admitted += gids
            gid = admitted.pop(0)
            rows = generate(model, gid, prompts[gid])
            if rows is None:   # 6c. failed: drop it, a spare replaces it (one atomic commit)
                spares = spares or take(divert=True)
                spare = spares.pop(0)
                with j.transaction() as tx:
                    tx.discarded([gid], reason="rollout_failed")
                    tx.admitted([spare], target_step=t, policy_version=step, replaces=gid)
                admitted.insert(0, spare)
                continue
            row_of[gid] = dp.put(gid, rows)   # 6d. rows durable in the data plane, then `finished`
            j.finished([gid], policy_version=step, locators=[row_of[gid]])
            ready.append(gid)
        group, ready = ready[:BATCH], ready[BATCH:]
        locs = [row_of.pop(g) for g in group]
        rows = [dp.get(loc) for loc in locs]
        j.trained(group, step=t)   # 6e. train
        loss = sum(((model(r["x"].view(1, 1)) - r["target"]) ** 2).sum() for r in rows) / len(rows)
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for w in model.parameters():
                w -= LR * w.grad
        step, trained_rows = t, trained_rows + locs
        print(f"step {step} epoch {epoch} loss {loss.item():.3f}", flush=True)
        if step % CKPT_EVERY == 0 or step == args.steps:
            # 7. Checkpoint: begin (this LSN is what the weights saw), save durably, commit.
            lsn = j.begin_checkpoint(step=step)
            save_weights(weights_path(args.run_dir, step),
                         {"model": model.state_dict(), "step": step, "epoch": epoch, "lsn": lsn})
            j.commit_checkpoint(step=step)
            dp.delete(trained_rows)   # no restore asks for them any more
            trained_rows = []
            for s in [s for s in saved_steps(args.run_dir) if s < step][:-1]:
                os.unlink(weights_path(args.run_dir, s))   # keep this one and the one before
            if step % COMPACT_EVERY == 0:   # 8. fold the journal into a cut, retire old segments
                compact(jdir, journal=j, data_plane=dp)
    j.close()   # 9. shutdown: groups still live stay in the journal for the next start
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main()
