"""What the dead tail did: the commits after the restore point on the active history, which a
resume abandons, read once for the restore rules (`restore_rules.py`).

Two kinds of facts come out of one pass:

* of the groups live at the point: the results (`finished`, `rollout_sealed`) and the latest
  prefixes (`rollout_progress`) of those ADMITTED there, the groups dropped, the attempts
  dispatched and the admissions of those waiting there (for salvage and the fences);
* the loader's takes after the point (`TailTake`), in order, each with what the tail did with
  its group (diverted, admitted, rollouts sealed, finished), up to the last `taken` that carries
  a loader state, and that loader state with its blobs: what adoption may bring back. A take
  after it cannot be adopted (no loader state says where the loader stood after it), nor one
  after a gap in the tail's LSNs (a damaged frame a salvage read passed over may have held a
  take that a later loader state is already past).

A take that is not the loader's: a `taken` without a loader state of a row that the same
commit drops (a resume's first commit regenerating a group whose rows were lost, under a fresh
id). The row is the dropped group's, which comes back by its own id or take: the re-take is
never adopted (the row would come back twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from journal import (Admitted, Commit, Discarded, Diverted, Finished, Owner, Progress, Reader, RolloutFailed,
                     RolloutProgress, RolloutSealed, State, Taken, TakenGroup)
from journal.fold import LoaderState, dispatched_attempt


@dataclass
class TailTake:
    """A group the dead tail took from the loader, and what the tail did with it (its drop, its
    training: nothing; the dead history's decisions do not bind the resumed one)."""

    group: TakenGroup
    diverted: bool = False
    admitted: Admitted | None = None  # its admission (target step, policy version, rollouts=N)
    finished: tuple | None = None     # (policy_version, locator) of the `finished` of a group without rollouts=
    sealed: dict[int, tuple] = field(default_factory=dict)  # index -> (policy_version, locator)
    progress: dict[int, Progress] = field(default_factory=dict)  # index -> its latest, unended


@dataclass
class DeadTail:
    """What happened after the restore point. Of the groups ADMITTED at it: group id ->
    (policy_version, locator) of a `finished`, (group, index) -> (policy_version, locator) of
    a `rollout_sealed`; the groups dropped. The adoptable takes, their loader state and the
    dataset size the last of them recorded."""

    finished: dict[int, tuple] = field(default_factory=dict)
    sealed: dict[tuple[int, int], tuple] = field(default_factory=dict)
    # (group, index) -> the latest `Progress` the tail recorded, unless a seal or a failure
    # ended it there (the fold's rule)
    progress: dict[tuple[int, int], Progress] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    # (group, index) -> the highest attempt the tail dispatched, for rollouts of groups live at
    # the point (`journal.fold.dispatched_attempt`), so the fences need not read the tail again
    attempts: dict[tuple[int, int], int] = field(default_factory=dict)
    # the groups waiting at the point (RESERVED, SPARE) that the tail admitted (`ever.admitted_groups`)
    admitted: set[int] = field(default_factory=set)
    takes: list[TailTake] = field(default_factory=list)
    loader: LoaderState | None = None  # the loader state of the last take in `takes`
    dataset_size: int | None = None


class _Reading:
    """One pass over the tail's commits, in LSN order."""

    def __init__(self, state: State):
        self.tail = DeadTail()
        self.live = state.live
        self.expect = state.lsn + 1        # the next LSN; a gap ends what may be adopted
        self.takes: dict[int, TailTake] = {}  # every loader take so far, by group id, in order
        self.adoptable = 0                 # how many of them lead up to the last loader state
        self.loader: tuple | None = None   # (lsn, packed, epoch, blobs or None) of that take
        self.size: int | None = None       # the latest dataset size a take recorded
        self.size_at_loader: int | None = None

    def commit(self, commit: Commit, blobs: dict | None) -> None:
        contiguous = self.expect is not None and commit.lsn == self.expect
        self.expect = commit.lsn + 1 if contiguous else None
        dropped_rows: set[tuple] = set()  # rows of the groups this commit dropped so far
        for ev in commit.events:
            kind = type(ev)
            if kind is Taken:
                if contiguous:
                    self.taken(ev, commit.lsn, blobs, dropped_rows)
            elif kind is Finished:
                self.finished(ev)
            elif kind is RolloutSealed or kind is RolloutFailed:
                self.rollouts(ev, kind is RolloutSealed)
            elif kind is RolloutProgress:
                self.progress(ev)
            elif kind is Admitted:
                for gid in ev.groups:
                    if gid in self.takes:
                        self.takes[gid].admitted = ev
                    elif gid in self.live:
                        self.tail.admitted.add(gid)
            elif kind is Diverted:
                for gid in ev.groups:
                    if gid in self.takes:
                        self.takes[gid].diverted = True
            elif kind is Discarded:
                self.tail.dropped.update(ev.groups)
                dropped_rows.update(self.row_of(gid) for gid in ev.groups)

    def row_of(self, gid: int) -> tuple | None:
        g = self.live.get(gid)
        if g is None:
            t = self.takes.get(gid)
            g = t.group if t is not None else None
        return (g.epoch, g.task_name, g.idx) if g is not None else None

    def taken(self, ev: Taken, lsn: int, blobs: dict | None, dropped_rows: set) -> None:
        for tg in ev.groups:
            if ev.loader_state is None and (tg.epoch, tg.task_name, tg.idx) in dropped_rows:
                continue  # a re-take of a row this commit dropped (see the module docstring)
            self.takes[tg.group_id] = TailTake(tg)
        if ev.dataset_size is not None:
            self.size = ev.dataset_size
        if ev.loader_state is not None:
            self.adoptable = len(self.takes)
            self.size_at_loader = self.size
            packed = ev.loader_state
            held = {d: blobs[d] for d in packed.refs} if blobs is not None else None  # the table grows
            self.loader = (lsn, packed, ev.groups[-1].epoch if ev.groups else None, held)

    def finished(self, ev: Finished) -> None:
        for i, gid in enumerate(ev.groups):
            loc = ev.locators[i] if ev.locators is not None else None
            g = self.live.get(gid)
            if g is not None and g.owner == Owner.ADMITTED:
                # as the fold records it: the finishing version, else the admitting one
                pv = ev.policy_version if ev.policy_version is not None else g.policy_version
                self.tail.finished[gid] = (pv, loc)
            t = self.takes.get(gid)
            if t is not None and t.admitted is not None:
                pv = ev.policy_version if ev.policy_version is not None else t.admitted.policy_version
                t.finished = (pv, loc)

    def rollouts(self, ev, sealing: bool) -> None:
        """A rollout event: the attempts it dispatched and, for a seal of a group ADMITTED at
        the point or taken after it, its result."""
        tail = self.tail
        for ref in ev.rollouts:
            g = self.live.get(ref.group_id)
            if g is None:
                t = self.takes.get(ref.group_id)
                if t is not None:
                    t.progress.pop(ref.index, None)
                    if sealing:
                        t.sealed[ref.index] = (ev.policy_version, ref.locator)
                continue
            key = (ref.group_id, ref.index)
            tail.attempts[key] = max(tail.attempts.get(key, 0), dispatched_attempt(ev, ref))
            tail.progress.pop(key, None)
            if sealing and g.owner == Owner.ADMITTED:
                tail.sealed[key] = (ev.policy_version, ref.locator)

    def progress(self, ev: RolloutProgress) -> None:
        """A prefix of a rollout of a group ADMITTED at the point or taken after it: the latest."""
        ref = ev.rollout
        p = Progress(ref.locator, ev.tokens, ev.turn, ev.policy_version)
        g = self.live.get(ref.group_id)
        if g is None:
            t = self.takes.get(ref.group_id)
            if t is not None:
                t.progress[ref.index] = p
            return
        key = (ref.group_id, ref.index)
        self.tail.attempts[key] = max(self.tail.attempts.get(key, 0), dispatched_attempt(ev, ref))
        if g.owner == Owner.ADMITTED:
            self.tail.progress[key] = p

    def done(self, reader: Reader) -> DeadTail:
        tail = self.tail
        if self.loader is not None:
            lsn, packed, epoch, held = self.loader
            if held is None:  # read from commits alone: the blobs are in the segment's table
                held = {}
                if packed.refs:
                    table = next(iter(reader.records(start_lsn=lsn, stop_lsn=lsn))).blobs
                    held = {d: table[d] for d in packed.refs}
            tail.loader = LoaderState(packed, held, epoch)
            tail.takes = list(self.takes.values())[:self.adoptable]
            tail.dataset_size = self.size_at_loader
        return tail


def read_dead_tail(reader: Reader, state: State, commits: Iterable[Commit] | None = None) -> DeadTail:
    """One pass over the commits after `state.lsn` (the dead tail a resume abandons): `commits`
    when the caller has them (the fold that found the point kept them), else read."""
    reading = _Reading(state)
    if commits is None:
        for rec in reader.records(start_lsn=state.lsn + 1):
            reading.commit(rec.commit, rec.blobs)
    else:
        for commit in commits:
            reading.commit(commit, None)
    return reading.done(reader)
