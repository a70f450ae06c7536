"""The recovery policies `python -m bench recovery` prices, each at the same crash of the same run.

At a crash at time t the trainer's weights come back from the last checkpoint committed before
t (step S); what a policy decides is what else comes back. Each policy answers with an
`Outcome`: the seconds of each rollout's generation it keeps, the groups it hands back to the
resumed run, and the loader's position (rows already handed out). `price` turns an outcome
into the figures, with one accounting for every policy.

Ours run through the library's own code: a real `journal.Journal` (sync="none", on tmpfs when
there is one) is fed the run's transitions in order (`JournalPolicy`); at a crash its directory
is copied as the crash leaves it (every commit written, nothing after: a SIGKILLed writer
leaves the same bytes; the writer itself goes on, so one pass serves every crash), and
`replay.restore(copy, salvage=True, data_plane=..., max_policy_lag=k)` decides what is kept,
once for each trainer lag bound k the bench prices (restore only reads the copy).

* **seals** (this library): every rollout sealed as it lands, every group finished, trained,
  checkpointed, as the run does it. Restore returns to the checkpoint's LSN (DESIGN 3) and, with
  salvage, keeps what was done after it: sealed rollouts and finished groups whose weights are
  at most S + k (DESIGN 14: the trainer's own off-policy bound; k = 0 is the checkpoint's
  weights only) and whose rows the data plane still has, of the groups live at the checkpoint
  and of the prompts the loader handed out after it, which it adopts under fresh group ids
  with the loader state after them.
* **progress** (DESIGN 12): the same, plus `rollout_progress` every K tokens of each running
  rollout (`record_progress`); the restore's `RecoveredRollout.progress.tokens` of an unsealed
  rollout is the prefix kept (`kept_prefix_seconds`), under the same bound; those two
  functions are the only code that names the API. The peers it answers: slime's straw queue
  ("Returned partial groups are persisted for continuation", docs/en/advanced/straw.md) and
  NeMo-RL's turn-level checkpoint (PR #4117, open: "unfinished rollouts can continue from their
  last durable turn instead of restarting from the original prompt").

The peers' rules run through small models of the rule, on the run's own record:

* **loader position only** (most frameworks): the checkpoint holds the weights and the
  loader's `state_dict()`, which in an asynchronous trainer is past every prompt handed out
  for generation (NeMo-RL's ledger write-up, `/work/shared/reference/rollout-recovery-ledger.txt`:
  "the dataloader had already moved past it and never rewinds"). Nothing generated is kept;
  prompts taken and not trained at the checkpoint are lost.
* **checkpoint ledger** (NeMo-RL's rollout recovery ledger, PR #3480, with sibling-level
  recovery, PR #3923; its periodic rollout snapshots, PR #3924, anchor to the trainer's
  checkpoints: "After training begins, a snapshot is only created when the trainer checkpoint
  [...]", so with `save_period=5` four steps in five are not covered): at the checkpoint the
  ledger holds every group handed out and not trained, the TransferQueue snapshot the rows
  finished by then ("Completed groups are restored directly from the TQ snapshot"; `sibling`
  "preserves each sealed sibling and redispatches only unfinished ones"). Kept: rollouts
  finished before the checkpoint. No prompt lost.
* **rollout bank** (Megatron-LM PR #6352, "Persist completed RolloutGroups to a write-through,
  per-group-fsync'd ledger the instant they assemble, so completed work survives a SIGKILL
  [...] and is restored at resume instead of regenerated"; trained-through groups compacted at
  the checkpoint boundary): kept, every rollout of a group complete before the crash and not
  trained into the restored weights; a group still generating loses all its rollouts (PR
  #6768, open: "each in-flight group can lose up to `G - 1` finished rollouts"). The PR says
  nothing of where prompts resume, so its prompts lost and twice are not modelled (n/a).
* **durable buffer** (verl RFC #7579, "A crash-durable replay buffer for the V1 trainer, behind
  TransferQueue", https://github.com/verl-project/verl/issues/7579, open): every trajectory
  is stored as it is produced, and a metadata journal snapshots the buffer every 2 seconds ("a
  2-second journal"); on restart "the journal restores the trajectory groups that had finished
  but not yet been trained as of its last snapshot, along with the list of prompts that were
  still generating (those start over on resume, since partial generations are not saved). The
  model and optimizer come back from their own checkpoint", whatever weights generated the
  trajectories ("the surviving inventory", its author's reply on trajectories from newer
  policy versions); "the current design doesn't retain consumed trajectories for replay", so
  what the dead run trained after the checkpoint is gone. Kept: every group finished by the
  last snapshot (a multiple of `RFC_SNAPSHOT_SECONDS` at or before the crash) and not trained
  by then, whatever its weights; a prompt still generating starts over, its finished
  trajectories with it, as the reply says. The RFC stores trajectories one by one, so a
  reading that keeps those too is priced beside it (`per_trajectory`, the `*_rfc_per_trajectory`
  figures: it keeps the most a reading of the RFC can keep). Where the loader resumes for the
  consumed prompts is not said: prompts lost and twice not modelled (n/a).
"""

from __future__ import annotations

import heapq
import os
import shutil
from dataclasses import dataclass, field
from typing import Iterator

from journal import GroupRef, Journal, RolloutRef
from replay import restore

from .recovery_workload import Run, Shape, Transition

RFC = "verl RFC #7579"
# name -> (label, what it is, as its project ships it)
PEERS = {
    "loader": ("loader position only", "most frameworks: the checkpoint's weights and loader position"),
    "ledger": ("NeMo-RL ledger at checkpoints", "NeMo-RL #3480/#3923/#3924: saved with the checkpoints"),
    "bank": ("Megatron-LM rollout bank", "Megatron-LM #6352: one durable record per finished group, "
             "whatever its weights (where prompts resume: not said)"),
    "rfc": ("verl RFC #7579 durable buffer", f"{RFC}: finished untrained groups of any version, a 2 s "
            "journal; prompts still generating start over (where prompts resume: not said)"),
}
# priced beside the peers, never the best peer: a reading of a peer's rule that keeps more than it says
READINGS = {
    "rfc_per_trajectory": ("verl RFC #7579 read per trajectory", f"{RFC}, the finished trajectories of "
                           "prompts still generating kept too"),
}
OURS = {
    "seals": ("per-rollout seals (ours)", "this library: Journal + replay.restore(salvage=True, "
              "max_policy_lag=k), which adopts the takes after the checkpoint"),
    "progress": ("seals + progress every K tokens (ours)", "DESIGN 12: rollout_progress every K tokens; "
                 "restored the same way"),
}


def ours(mode: str, k: int) -> str:
    """The name of our policy `mode` restored with max_policy_lag `k`."""
    return f"{mode}_k{k}"


def label(name: str) -> str:
    """A policy's label, ours with its lag bound."""
    if name in PEERS or name in READINGS:
        return {**PEERS, **READINGS}[name][0]
    mode, k = name.rsplit("_k", 1)
    return f"{OURS[mode][0]}, k = {k}"


RFC_SNAPSHOT_SECONDS = 2.0   # verl RFC #7579's journal: "a 2-second journal"


@dataclass(frozen=True)
class Crash:
    """A crash at `time`; the restored checkpoint: its `step`, and the transition `seq` of its
    `begin_checkpoint` (the point restore returns to)."""

    time: float
    step: int
    seq: int

    @classmethod
    def at(cls, run: Run, time: float) -> "Crash":
        step, _, seq = run.checkpoint_before(time)
        return cls(time, step, seq)


@dataclass
class Outcome:
    """What a policy brings back at a crash."""

    kept: dict[tuple[int, int], float] = field(default_factory=dict)  # (group, index) -> seconds
    handed_back: set[int] = field(default_factory=set)                # group ids
    loader_position: int | None = 0   # rows already handed out; None: the rule does not say


@dataclass
class Price:
    """One policy at one crash, in generation-seconds of rollouts that ran before the crash and
    are not in the restored weights, minus what the policy keeps. `lost`: those of groups not
    trained at the crash (the work the verl RFC prices); of it, `lost_in_flight` of rollouts
    still generating at the crash and `lost_taken_after_checkpoint` of groups the loader handed
    out after the restored checkpoint. Of `lost` again, by what could keep it:
    `lost_newer_weights` of rollouts generated by weights newer than the checkpoint's (what a
    restore with max_policy_lag 0 never keeps, DESIGN 12; with k > 0 it keeps those of weights up
    to S + k, DESIGN 14), `lost_in_flight_checkpoint_weights` of rollouts in flight at the crash
    on weights no newer than the checkpoint's (what progress saves at any bound);
    `lost_other` the rest. `lost_retrained`: those of groups trained after the checkpoint (the steps
    the restored weights redo). A prompt the resumed run serves neither
    from the restored weights, nor from what the policy hands back, nor from the loader is
    lost; one it serves twice is trained twice (None: the policy's rule says nothing of the
    loader)."""

    lost: float = 0.0
    lost_in_flight: float = 0.0
    lost_taken_after_checkpoint: float = 0.0
    lost_newer_weights: float = 0.0
    lost_in_flight_checkpoint_weights: float = 0.0
    lost_other: float = 0.0
    lost_retrained: float = 0.0
    prompts_lost: int | None = 0
    prompts_twice: int | None = 0
    in_flight: int = 0


def price(run: Run, crash: Crash, outcome: Outcome) -> Price:
    p = Price()
    position = outcome.loader_position
    for g in run.groups.values():
        if run.transitions[g.taken_seq].time >= crash.time:
            continue
        in_model = g.trained_step is not None and g.trained_step <= crash.step
        if position is not None:
            served = in_model + (g.group_id in outcome.handed_back) + (g.idx >= position)
            p.prompts_lost += served == 0
            p.prompts_twice += served >= 2
        for r in g.rollouts:
            running = r.start is not None and r.start < crash.time < r.end
            p.in_flight += running
            if in_model:
                continue
            kept = outcome.kept.get((g.group_id, r.index), 0.0)
            gone = 0.0 if kept >= r.seconds else r.generated(crash.time) - kept
            if g.trained_at is not None and g.trained_at < crash.time:
                p.lost_retrained += gone
                continue
            p.lost += gone
            p.lost_in_flight += gone if running else 0.0
            p.lost_taken_after_checkpoint += gone if g.taken_seq > crash.seq else 0.0
            newer = r.version is not None and r.version > crash.step
            p.lost_newer_weights += gone if newer else 0.0
            p.lost_in_flight_checkpoint_weights += gone if running and not newer else 0.0
            p.lost_other += 0.0 if running or newer else gone
    if position is None:
        p.prompts_lost = p.prompts_twice = None
    return p


def _untrained_at_checkpoint(run: Run, crash: Crash):
    """The groups handed out before the checkpoint and not trained into its weights."""
    for g in run.groups.values():
        if g.taken_seq < crash.seq and not (g.trained_step is not None and g.trained_step <= crash.step):
            yield g


def loader_position_only(run: Run, crash: Crash) -> Outcome:
    return Outcome(loader_position=run.rows_taken_before(crash.seq))


def checkpoint_ledger(run: Run, crash: Crash) -> Outcome:
    out = Outcome(loader_position=run.rows_taken_before(crash.seq))
    for g in _untrained_at_checkpoint(run, crash):
        out.handed_back.add(g.group_id)
        for r in g.rollouts:
            if r.sealed_seq is not None and r.sealed_seq < crash.seq:
                out.kept[(g.group_id, r.index)] = r.seconds
    return out


def rollout_bank(run: Run, crash: Crash) -> Outcome:
    out = Outcome(loader_position=None)
    for g in run.groups.values():
        banked = g.finished_at is not None and g.finished_at < crash.time
        if banked and not (g.trained_step is not None and g.trained_step <= crash.step):
            out.handed_back.add(g.group_id)
            out.kept.update({(g.group_id, r.index): r.seconds for r in g.rollouts})
    return out


def durable_buffer(run: Run, crash: Crash, *, per_trajectory: bool = False) -> Outcome:
    """verl RFC #7579's restore: the groups finished and not trained at its last snapshot, of
    any weights; `per_trajectory`: also the finished trajectories of groups still generating."""
    snapshot = crash.time - crash.time % RFC_SNAPSHOT_SECONDS
    out = Outcome(loader_position=None)
    for g in run.groups.values():
        consumed = g.trained_at is not None and g.trained_at <= snapshot
        if consumed or (g.trained_step is not None and g.trained_step <= crash.step):
            continue
        finished = [r for r in g.rollouts if r.end is not None and r.end <= snapshot]
        if finished and (per_trajectory or len(finished) == len(g.rollouts)):
            out.handed_back.add(g.group_id)
            out.kept.update({(g.group_id, r.index): r.seconds for r in finished})
    return out


class WrittenRows:
    """The trainer's data plane as restore sees it: every row the run put, each before the
    journal names it, none deleted. Restore asks it only `has`."""

    def __init__(self) -> None:
        self.rows: set[str] = set()

    def put(self, locator: str) -> None:
        self.rows.add(locator)

    def has(self, locator: str) -> bool:
        return locator in self.rows


def _progress_points(run: Run) -> Iterator[tuple[float, int, int, int]]:
    """(time, group, index, tokens) of every K tokens of every rollout, in time order."""
    shape = run.shape
    every = shape.progress_seconds
    points = []
    for r in run.rollouts():
        if r.start is None:
            continue
        k = 1
        while r.start + k * every < r.end:  # strictly before the seal, as computed
            points.append((r.start + k * every, r.group_id, r.index, k * shape.progress_tokens))
            k += 1
    points.sort()
    return iter(points)


def calls(run: Run, *, progress: bool) -> Iterator[tuple[float, object]]:
    """The journal calls of the run in time order, as (time, call): its transitions, and with
    `progress` the (group, index, tokens) of every K tokens of every rollout."""
    transitions = ((t.time, 0, t.seq, t) for t in run.transitions)
    if not progress:
        return ((time, t) for time, _, _, t in transitions)
    points = ((time, 1, n, p) for n, (time, *p) in enumerate(_progress_points(run)))
    return ((time, call) for time, _, _, call in heapq.merge(transitions, points))


# The progress policy's two contacts with DESIGN 12's API, and the only code that names it:
# `Journal.rollout_progress` to write, `RecoveredRollout.progress.tokens` to read back.

def record_progress(j: Journal, rows: WrittenRows, run: Run, group_id: int, index: int, tokens: int) -> None:
    """Put the rollout's first `tokens` tokens in the data plane, then journal its progress."""
    r = run.groups[group_id].rollouts[index]
    locator = f"{r.locator}-t{tokens}"
    rows.put(locator)
    j.rollout_progress(RolloutRef(group_id, index, 0, locator), tokens=tokens, turn=None,
                       policy_version=r.version)


def kept_prefix_seconds(recovered_rollout, shape: Shape) -> float:
    """The generation time of the prefix restore hands back with an unsealed rollout."""
    progress = recovered_rollout.progress
    return 0.0 if progress is None else progress.tokens / shape.tokens_per_second


class JournalPolicy:
    """Ours: the run's transitions fed to a real `Journal` in `directory`, priced at crashes in
    time order (`at`), restored once for each lag bound in `lags`."""

    def __init__(self, run: Run, directory: str, *, progress: bool, lags: list[int]):
        self.run, self.directory, self.progress, self.lags = run, directory, progress, lags
        self.journal = Journal.open(os.path.join(directory, "journal"), sync="none")
        self.rows = WrittenRows()
        self.feed = calls(run, progress=progress)
        self.next_call: tuple[float, object] | None = None  # drawn from the feed, not applied yet
        self.crashes = 0
        # the run's group of each loader row (one pass: a row is one group); a recovered group
        # is known by its row, whatever id restore gave it (adopted, reissued)
        self.group_of_row = {g.idx: g for g in run.groups.values()}

    def _apply(self, item) -> None:
        if isinstance(item, Transition):
            self._transition(item)
        else:
            record_progress(self.journal, self.rows, self.run, *item)

    def _transition(self, t: Transition) -> None:
        j, a = self.journal, t.args
        if t.kind == "taken":
            gid, idx, next_idx = a
            j.taken([GroupRef(idx=idx, group_id=gid)], loader_state={"next": next_idx})
        elif t.kind == "admitted":
            gids, target_step, version = a
            j.admitted(gids, target_step=target_step, policy_version=version,
                       rollouts=self.run.shape.rollouts_per_group)
        elif t.kind == "rollout_sealed":
            gid, index, locator, version = a
            self.rows.put(locator)
            j.rollout_sealed([RolloutRef(gid, index, 0, locator)], policy_version=version)
        elif t.kind == "finished":
            j.finished(a)
        elif t.kind == "trained":
            gids, step = a
            j.trained(gids, step=step)
        elif t.kind == "begin_checkpoint":
            j.begin_checkpoint(step=a[0])
        else:
            j.commit_checkpoint(step=a[0])

    def at(self, crash: Crash) -> dict[int, Outcome]:
        """Feed everything before `crash`, copy the journal as the crash leaves it, restore the
        copy with each lag bound: the outcome by bound."""
        while True:
            if self.next_call is None:
                self.next_call = next(self.feed, None)
            if self.next_call is None or self.next_call[0] >= crash.time:
                break
            self._apply(self.next_call[1])
            self.next_call = None
        self.crashes += 1
        copy = os.path.join(self.directory, f"crash-{self.crashes}")
        shutil.copytree(self.journal.path, copy)
        try:
            return {k: self._outcome(restore(copy, salvage=True, data_plane=self.rows, max_policy_lag=k))
                    for k in self.lags}
        finally:
            shutil.rmtree(copy)

    def _outcome(self, state) -> Outcome:
        if state.demoted:
            raise RuntimeError(f"restore demoted groups {[g.replaces for g in state.demoted]}: "
                               "the bench's data plane lost rows it never deletes")
        loader = state.loader_state
        out = Outcome(loader_position=loader["next"] if loader else 0)
        for g in state.groups:
            run_group = self.group_of_row[g.idx]
            out.handed_back.add(run_group.group_id)
            for r in g.rollouts or ():
                rollout = run_group.rollouts[r.index]
                if r.sealed:
                    out.kept[(run_group.group_id, r.index)] = rollout.seconds
                elif self.progress:
                    out.kept[(run_group.group_id, r.index)] = kept_prefix_seconds(r, self.run.shape)
        return out

    def close(self) -> None:
        self.journal.close()
