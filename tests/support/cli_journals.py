"""Real journals for the `journal-inspect` tests, written by a small simulated async trainer.

`Loader` is a deterministic shuffling loader with a `state_dict()`; `Trainer`
runs one step ahead (the batch of step S+1 is taken and admitted while step S
trains), uses a spare to replace a failed rollout now and then, checkpoints,
and resumes from `replay.restore` like a real trainer would. The builders at
the bottom make the journals the tests inspect: a clean run with a crash and a
correct resume, a resume with an older loader state (rows trained twice) and
one with a newer loader state (rows lost).
"""

from __future__ import annotations

import random

from journal import GroupRef, Journal
from replay import restore
from snapshot import compact

TASK = "math"


class Loader:
    """Rows 0..n-1 in a per-epoch shuffled order; its state is (epoch, position)."""

    def __init__(self, n: int, seed: int = 7):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0

    def order(self, epoch: int) -> list[int]:
        rows = list(range(self.n))
        random.Random(self.seed * 1000 + epoch).shuffle(rows)
        return rows

    def next_batch(self, k: int) -> list[tuple[int, int]]:
        out = []
        while len(out) < k:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
            out.append((self.epoch, self.order(self.epoch)[self.pos]))
            self.pos += 1
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, d: dict) -> None:
        self.epoch, self.pos = d["epoch"], d["pos"]


class Trainer:
    def __init__(self, path: str, loader: Loader, *, batch: int = 4, fail_every: int = 3,
                 segment_bytes: int = 1 << 16, resume: bool = False):
        """A new run in `path`, or with `resume` the run there carried on from its latest
        committed checkpoint (`resume()`)."""
        self.path, self.loader, self.batch, self.fail_every = path, loader, batch, fail_every
        self.segment_bytes = segment_bytes
        self.inflight: dict[int, list[int]] = {}   # target step -> admitted group ids
        self.spares: list[int] = []
        self.step_no = 0
        if resume:
            self.resume()
        else:
            self.j = Journal.open(path, sync="none", segment_bytes=segment_bytes)

    def take(self, n: int) -> list[int]:
        rows = self.loader.next_batch(n)
        return self.j.taken([GroupRef(idx=i, task_name=TASK, epoch=e) for e, i in rows],
                            loader_state=self.loader.state_dict())

    def start(self) -> None:
        self.spares = self.take(1)
        self.j.diverted(self.spares)
        self.inflight[1] = self.take(self.batch)
        self.j.admitted(self.inflight[1], target_step=1, policy_version=0)

    def step(self) -> None:
        s = self.step_no = self.step_no + 1
        nxt = self.take(self.batch)
        self.j.admitted(nxt, target_step=s + 1, policy_version=s)
        cur = self.inflight.pop(s, [])
        if self.fail_every and s % self.fail_every == 0 and cur:
            failed = cur[0]
            if self.spares:
                spare = self.spares.pop()
                with self.j.transaction() as tx:
                    tx.discarded([failed], reason="rollout_failed")
                    tx.admitted([spare], target_step=s, policy_version=s, replaces=failed)
                cur = cur[1:] + [spare]
            else:
                self.j.discarded([failed], reason="filtered")
                cur = cur[1:]
        if cur:
            self.j.finished(cur, policy_version=s - 1, locators=[f"dp/{g}" for g in cur])
            self.j.trained(cur, step=s)
        self.inflight[s + 1] = nxt
        if not self.spares:
            self.spares = self.take(1)
            self.j.diverted(self.spares)

    def checkpoint(self) -> None:
        self.j.begin_checkpoint(step=self.step_no)
        self.j.commit_checkpoint(step=self.step_no)

    def crash(self) -> None:
        self.j.close()

    def resume(self, loader_state: dict | None = None) -> None:
        """Restore the latest committed checkpoint and carry on; `loader_state` overrides the
        restored one (to plant a bug: an older or newer dataloader checkpoint)."""
        st = restore(self.path)
        self.loader.load_state_dict(loader_state if loader_state is not None else st.loader_state)
        self.j = Journal.open(self.path, sync="none", segment_bytes=self.segment_bytes, resume=st)
        self.step_no = st.step
        self.inflight = {}
        for g in st.admitted:
            self.inflight.setdefault(g.target_step, []).append(g.group_id)
        self.spares = [g.group_id for g in st.spare]
        if st.reserved:
            ids = [g.group_id for g in st.reserved]
            self.j.admitted(ids, target_step=st.step + 1, policy_version=st.step)
            self.inflight.setdefault(st.step + 1, []).extend(ids)
        if st.replay:
            self.j.trained([g.group_id for g in st.replay], step=st.step + 1)


def clean_run(path: str, *, rows: int = 10, steps_before_crash: int = 7, steps_after: int = 5,
              **kw) -> Trainer:
    """Checkpoints at steps 2, 4 and 6, a crash after step 7, a correct resume from step 6, and
    more steps: every row is trained once; the dead tail held step 7's work."""
    return restarted_run(path, before=steps_before_crash, dead=0, after=steps_after, rows=rows, **kw)


def double_train_run(path: str) -> Trainer:
    """The resume feeds the loader an older state (that of step 2's checkpoint) while the journal
    restores step 6: the rows of steps 3-6 are taken and trained a second time."""
    t = Trainer(path, Loader(40), fail_every=0)
    t.start()
    old = None
    for _ in range(7):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
        if t.step_no == 2:
            old = t.loader.state_dict()
    t.crash()
    t.resume(loader_state=old)
    for _ in range(3):
        t.step()
    t.j.close()
    return t


def lost_rows_run(path: str) -> tuple[Trainer, list[tuple[int, int]]]:
    """The resume feeds the loader the state of the crashed run (newer than the checkpoint): the
    rows the dead tail took after the checkpoint are never taken again. Returns the lost rows
    as (epoch, idx)."""
    t = Trainer(path, Loader(40), fail_every=0)
    t.start()
    for _ in range(6):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
    pos_at_ckpt = t.loader.state_dict()
    t.step()
    t.step()  # the dead tail takes the batches of steps 8 and 9
    newer = t.loader.state_dict()
    t.crash()
    order = t.loader.order(0)
    lost = [(0, order[i]) for i in range(pos_at_ckpt["pos"], newer["pos"])]
    t.resume(loader_state=newer)
    for _ in range(4):
        t.step()
    t.j.close()
    return t, lost


def restarted_run(path: str, *, before: int, dead: int, after: int, compact_every: int | None = None,
                  retention: str | None = None, rows: int = 500, **kw) -> Trainer:
    """`before` steps (a checkpoint every second one), `dead` more (the dead tail), a crash, a
    resume from the latest committed checkpoint, `after` steps; with `compact_every`, the
    resumed run compacts (with `retention`) at every step number it divides. Closed. `kw`:
    the `Trainer`'s."""
    t = Trainer(path, Loader(rows), **kw)
    t.start()
    for _ in range(before):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
    for _ in range(dead):
        t.step()
    t.crash()
    t.resume()
    for _ in range(after):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
        if compact_every and t.step_no % compact_every == 0:
            compact(path, journal=t.j, retention=retention)
    t.j.close()
    return t
