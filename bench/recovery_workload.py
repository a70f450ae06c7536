"""The seeded run `python -m bench recovery` crashes: an asynchronous GRPO trainer on a virtual clock.

One `Shape` fixes the trainer; `simulate(shape, steps, seed)` plays it on a virtual clock (no
sleeping: a run of hours of virtual time takes well under a second) and records every
transition the trainer would journal, in order, with its virtual time:

* the loader hands out groups of `groups_per_step` prompts (rows 0, 1, 2, ... of one pass)
  whenever fewer than `depth_steps` batches are taken and not yet trained (the buffer depth:
  how far generation runs ahead of training); each group is admitted with its
  `rollouts_per_group` rollouts;
* `slots` rollouts generate at once (the inference engine's concurrency), first come first
  served; a rollout lasts a long-tailed (log-normal) number of seconds, drawn from the seed,
  and runs on the weights that were current when it started (its `version`); its tokens come
  at `tokens_per_second`;
* a finished rollout is sealed; a group whose rollouts are all sealed is finished and queues
  for training; the trainer takes the first `groups_per_step` finished groups, trains for
  `train_seconds` (overlapped with generation, which never waits for it while the buffer has
  room), marks them trained at the next step, and the weights become that step's;
* every `save_period` steps the trainer checkpoints (begun and committed at once).

`crash_times` draws the crash schedule: instants after the first checkpoint, uniform over the
rest of the run. Every policy is priced on the same run and the same instants.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Shape:
    """A trainer's shape. `source` says what of it comes from the reference it is calibrated
    against; the rest is chosen so that the loader-position-only policy loses, per crash, what
    that reference measured (`reference_loss`, generation-seconds)."""

    name: str
    label: str
    source: str
    reference_loss: tuple[float, float]
    rollouts_per_group: int
    groups_per_step: int
    slots: int
    mean_seconds: float        # a rollout's mean generation time
    sigma: float               # of the log-normal of rollout times
    max_seconds: float         # generation is cut there (a max-tokens limit)
    depth_steps: int           # batches taken and not trained, at most
    train_seconds: float       # one training step
    tokens_per_second: float   # one rollout's decode rate
    progress_tokens: int       # K: progress recorded every K tokens
    save_period: int = 5       # a checkpoint every `save_period` steps

    def parameters(self) -> dict:
        return {"rollouts_per_group": self.rollouts_per_group, "groups_per_step": self.groups_per_step,
                "slots": self.slots, "rollout_seconds_mean": self.mean_seconds,
                "rollout_seconds_lognormal_sigma": self.sigma, "rollout_seconds_max": self.max_seconds,
                "buffer_depth_steps": self.depth_steps, "train_seconds": self.train_seconds,
                "tokens_per_second": self.tokens_per_second, "progress_every_tokens": self.progress_tokens,
                "save_period": self.save_period}

    @property
    def progress_seconds(self) -> float:
        """The generation time of K tokens."""
        return self.progress_tokens / self.tokens_per_second


@dataclass
class Rollout:
    group_id: int
    index: int
    seconds: float             # its whole generation time
    start: float | None = None
    version: int | None = None  # the weights it ran on
    sealed_seq: int | None = None

    @property
    def end(self) -> float | None:
        return None if self.start is None else self.start + self.seconds

    @property
    def locator(self) -> str:
        return f"g{self.group_id}-r{self.index}-a0"

    def generated(self, t: float) -> float:
        """Seconds of its generation done before `t`."""
        if self.start is None or t <= self.start:
            return 0.0
        return min(t, self.end) - self.start


@dataclass
class Group:
    group_id: int
    idx: int
    target_step: int
    rollouts: list[Rollout]
    taken_seq: int
    finished_seq: int | None = None
    finished_at: float | None = None
    trained_step: int | None = None
    trained_at: float | None = None


@dataclass(frozen=True)
class Transition:
    """One journal call of the trainer: `kind` is the `Journal` method, `args` its arguments
    in the bench's own terms (`recovery_policies` turns them into the call)."""

    time: float
    seq: int
    kind: str
    args: tuple


@dataclass
class Run:
    shape: Shape
    groups: dict[int, Group] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    checkpoints: list[tuple[int, float, int]] = field(default_factory=list)  # (step, time, seq)
    step_times: list[float] = field(default_factory=list)  # when each training step ended
    end: float = 0.0
    busy_slot_seconds: float = 0.0

    def rollouts(self):
        for g in self.groups.values():
            yield from g.rollouts

    def checkpoint_before(self, t: float) -> tuple[int, float, int] | None:
        """The last checkpoint committed before `t`: what a crash at `t` restores."""
        last = None
        for ck in self.checkpoints:
            if ck[1] < t:
                last = ck
        return last

    def steps_between(self, start: float, end: float) -> int:
        """Training steps that ended between `start` and `end`."""
        return sum(1 for t in self.step_times if start < t < end)

    def rows_taken_before(self, seq: int) -> int:
        """The loader's position at transition `seq`: the rows it had handed out before it."""
        return sum(1 for g in self.groups.values() if g.taken_seq < seq)

    def staleness(self) -> int:
        """The lag the trainer trains at: the median, over the rollouts it trained, of the steps
        between the weights that generated one and the weights that trained it (step t trains
        on the weights of step t - 1)."""
        lags = sorted(g.trained_step - 1 - r.version for g in self.groups.values() if g.trained_step is not None
                      for r in g.rollouts)
        return lags[len(lags) // 2] if lags else 0

    @property
    def slot_utilization(self) -> float:
        return self.busy_slot_seconds / (self.shape.slots * self.end) if self.end else 0.0


class _Simulator:
    """The event loop: one heap of (time, order, action) on the virtual clock."""

    def __init__(self, shape: Shape, steps: int, seed: int):
        self.shape, self.steps = shape, steps
        self.rng = random.Random(seed)
        self.run = Run(shape)
        self.heap: list = []
        self.order = 0
        self.now = 0.0
        self.pending: deque[Rollout] = deque()
        self.free_slots = shape.slots
        self.finished: deque[Group] = deque()
        self.untrained = 0          # groups taken, not trained
        self.next_idx = 0
        self.next_gid = 1
        self.version = 0            # the weights' step
        self.trained_steps = 0
        self.training = False
        self.batches_taken = 0

    def emit(self, kind: str, *args) -> int:
        seq = len(self.run.transitions)
        self.run.transitions.append(Transition(self.now, seq, kind, args))
        return seq

    def at(self, time: float, action, *args) -> None:
        self.order += 1
        heapq.heappush(self.heap, (time, self.order, action, args))

    def seconds(self) -> float:
        s = self.shape
        mu = math.log(s.mean_seconds) - s.sigma ** 2 / 2
        return min(self.rng.lognormvariate(mu, s.sigma), s.max_seconds)

    def take(self) -> None:
        s = self.shape
        while self.untrained + s.groups_per_step <= s.depth_steps * s.groups_per_step:
            self.batches_taken += 1
            gids = []
            for _ in range(s.groups_per_step):
                gid, self.next_gid = self.next_gid, self.next_gid + 1
                idx, self.next_idx = self.next_idx, self.next_idx + 1
                seq = self.emit("taken", gid, idx, self.next_idx)
                rollouts = [Rollout(gid, i, self.seconds()) for i in range(s.rollouts_per_group)]
                self.run.groups[gid] = Group(gid, idx, self.batches_taken, rollouts, seq)
                gids.append(gid)
                self.pending.extend(rollouts)
            self.emit("admitted", tuple(gids), self.batches_taken, self.version)
            self.untrained += s.groups_per_step
        self.dispatch()

    def dispatch(self) -> None:
        while self.free_slots and self.pending:
            r = self.pending.popleft()
            r.start, r.version = self.now, self.version
            self.free_slots -= 1
            self.run.busy_slot_seconds += r.seconds
            self.at(r.end, self.rollout_done, r)

    def rollout_done(self, r: Rollout) -> None:
        self.free_slots += 1
        r.sealed_seq = self.emit("rollout_sealed", r.group_id, r.index, r.locator, r.version)
        g = self.run.groups[r.group_id]
        if all(x.sealed_seq is not None for x in g.rollouts):
            g.finished_seq, g.finished_at = self.emit("finished", g.group_id), self.now
            self.finished.append(g)
            self.train()
        self.dispatch()

    def train(self) -> None:
        s = self.shape
        if self.training or len(self.finished) < s.groups_per_step or self.trained_steps >= self.steps:
            return
        batch = [self.finished.popleft() for _ in range(s.groups_per_step)]
        self.training = True
        self.at(self.now + s.train_seconds, self.trained, batch)

    def trained(self, batch: list[Group]) -> None:
        self.trained_steps += 1
        step = self.trained_steps
        self.emit("trained", tuple(g.group_id for g in batch), step)
        self.run.step_times.append(self.now)
        for g in batch:
            g.trained_step, g.trained_at = step, self.now
        self.untrained -= len(batch)
        self.version, self.training = step, False
        if step % self.shape.save_period == 0:
            seq = self.emit("begin_checkpoint", step)
            self.emit("commit_checkpoint", step)
            self.run.checkpoints.append((step, self.now, seq))
        if step < self.steps:
            self.take()
            self.train()

    def play(self) -> Run:
        self.take()
        while self.heap and self.trained_steps < self.steps:
            self.now, _, action, args = heapq.heappop(self.heap)
            action(*args)
        self.run.end = self.now
        # generation counted up to the end of the run only
        self.run.busy_slot_seconds -= sum(max(0.0, r.end - self.now) for r in self.run.rollouts()
                                          if r.start is not None)
        return self.run


def simulate(shape: Shape, steps: int, seed: int) -> Run:
    """The trainer of `shape` for `steps` training steps, on a virtual clock."""
    return _Simulator(shape, steps, seed).play()


def crash_times(run: Run, n: int, seed: int) -> list[float]:
    """`n` crash instants after the first checkpoint, uniform over the rest of the run, sorted."""
    if not run.checkpoints:
        raise ValueError(f"a run of {run.end:.0f} s without a checkpoint cannot restore anything: "
                         f"run more than save_period={run.shape.save_period} steps")
    rng = random.Random(seed)
    first = run.checkpoints[0][1]
    return sorted(rng.uniform(first, run.end) for _ in range(n))
