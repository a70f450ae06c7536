"""What the dead tail did: the commits after the restore point on the active history, which a
resume abandons, read once for the restore rules (`restore_rules.py`).

Two kinds of facts come out of one pass:

* of the groups live at the point: the results (`finished`, `rollout_sealed`) and the latest
  prefixes (`rollout_progress`) of those ADMITTED there, the groups dropped, the attempts
  dispatched and the admissions of those waiting there (for salvage and the fences), and what
  the tail did with a waiting group it admitted (`waiting`: a `TailTake` each, as for a take);
* the loader's takes after the point (`TailTake`), in order, each with what the tail did with
  its group (diverted, admitted, rollouts sealed, finished), up to the last `taken` that carries
  a loader state, and that loader state with its blobs: what adoption may bring back. A take
  after it cannot be adopted (no loader state says where the loader stood after it), nor one
  after a gap in the tail's LSNs (a damaged frame a salvage read passed over may have held a
  take that a later loader state is already past).

A result or prefix recorded without a policy version is read as made by the weights that
admitted its group (the admission's version): a version is never lost on the way.

A take that is not the loader's: a `taken` without a loader state of a row that the same
commit drops (a resume's first commit bringing a group back under a fresh id: rows lost, or a
waiting group reissued). The row is the dropped group's, which comes back by its own id or
take: the re-take is never adopted (the row would come back twice). What the tail did under the
re-take of a group waiting at the point is followed as that group's (`waiting`), so a second
crash before the next checkpoint hands its work back again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from journal import Admitted, Commit, Finished, Owner, Progress, Reader, RolloutProgress, State, Taken, TakenGroup
from journal.kinds import KIND_OF, handlers
from journal.state import LoaderState, span_after

from .recovered_state import with_version


@dataclass
class TailTake:
    """A group the dead tail took from the loader, and what the tail did with it (its drop, its
    training: nothing; the dead history's decisions do not bind the resumed one)."""

    group: TakenGroup
    diverted: bool = False
    admitted: Admitted | None = None  # its admission (target step, policy version, rollouts=N)
    finished: tuple | None = None     # (policy_version, locator) of the `finished` of a group without rollouts=
    sealed: dict[int, tuple] = field(default_factory=dict)  # index -> (policy_version, locator, since)
    progress: dict[int, Progress] = field(default_factory=dict)  # index -> its latest, unended


@dataclass
class DeadTail:
    """What happened after the restore point. Of the groups ADMITTED at it: group id ->
    (policy_version, locator) of a `finished`, (group, index) -> (policy_version, locator) of
    a `rollout_sealed` (and `since`, the oldest version of its tokens when older weights began
    it: the prefix it continued, as the fold keeps it); the groups dropped. The adoptable
    takes, their loader state and the dataset size the last of them recorded."""

    finished: dict[int, tuple] = field(default_factory=dict)
    sealed: dict[tuple[int, int], tuple] = field(default_factory=dict)
    # (group, index) -> the latest `Progress` the tail recorded, unless a seal or a failure
    # ended it there (the fold's rule)
    progress: dict[tuple[int, int], Progress] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    # (group, index) -> the highest attempt the tail dispatched, for rollouts of groups live at
    # the point (their kind's `dispatched`), so the fences need not read the tail again
    attempts: dict[tuple[int, int], int] = field(default_factory=dict)
    # the groups waiting at the point (RESERVED, SPARE) that the tail admitted (`ever.admitted_groups`)
    admitted: set[int] = field(default_factory=set)
    # of those, group id -> what the tail did with it from its admission on
    waiting: dict[int, TailTake] = field(default_factory=dict)
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
        self.retaken: dict[int, int] = {}  # the id of a re-take -> the dropped group whose row it took
        self.ended: set[tuple[int, int]] = set()  # rollouts whose prefix at the point the tail ended
        self.adoptable = 0                 # how many of them lead up to the last loader state
        self.loader: tuple | None = None   # (lsn, packed, epoch, blobs or None) of that take
        self.size: int | None = None       # the latest dataset size a take recorded
        self.size_at_loader: int | None = None
        # the commit being read (`commit`): its LSN, its blobs, whether its takes may be adopted
        # (no gap before it), and row -> group of the groups it dropped so far
        self.lsn, self.blobs, self.contiguous, self.dropped_rows = 0, None, False, {}

    def commit(self, commit: Commit, blobs: dict | None) -> None:
        contiguous = self.expect is not None and commit.lsn == self.expect
        self.expect = commit.lsn + 1 if contiguous else None
        self.lsn, self.blobs, self.contiguous, self.dropped_rows = commit.lsn, blobs, contiguous, {}
        for ev in commit.events:
            read = _READS.get(type(ev))
            if read is not None:
                read(self, ev)

    # What each kind the tail's reading follows says (`_READS`), of the commit being read.

    def admitted(self, ev: Admitted) -> None:
        for gid in ev.groups:
            if gid in self.takes:
                self.takes[gid].admitted = ev
                continue
            if gid in self.live:
                self.tail.admitted.add(gid)
            waited = self.retaken.get(gid, gid)  # a waiting group, or its re-take
            g = self.live.get(waited)
            if g is not None and g.owner in (Owner.RESERVED, Owner.SPARE):
                self.tail.waiting[waited] = TailTake(TakenGroup(waited, g.idx, g.task_name, g.epoch, g.fingerprint),
                                                     g.owner == Owner.SPARE, ev)

    def diverted(self, ev) -> None:
        for gid in ev.groups:
            if gid in self.takes:
                self.takes[gid].diverted = True

    def discarded(self, ev) -> None:
        self.tail.dropped.update(ev.groups)
        self.dropped_rows.update((self.row_of(gid), gid) for gid in ev.groups)

    def followed(self, gid: int) -> TailTake | None:
        """The take of group `gid` whose work the tail follows: a loader take after the point,
        or a group waiting at it that the tail admitted, under its id or a re-take's."""
        t = self.takes.get(gid)
        return t if t is not None else self.tail.waiting.get(self.retaken.get(gid, gid))

    def row_of(self, gid: int) -> tuple | None:
        g = self.live.get(gid)
        if g is None:
            t = self.takes.get(gid)
            g = t.group if t is not None else None
        return (g.epoch, g.task_name, g.idx) if g is not None else None

    def taken(self, ev: Taken) -> None:
        if not self.contiguous:
            return  # after a gap: not adoptable (see the module docstring)
        lsn, blobs = self.lsn, self.blobs
        for tg in ev.groups:
            dropped = self.dropped_rows.get((tg.epoch, tg.task_name, tg.idx)) if ev.loader_state is None else None
            if dropped is not None:  # a re-take of a row this commit dropped (see the module docstring)
                self.retaken[tg.group_id] = dropped
                continue
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
                self.tail.finished[gid] = (_version(ev.policy_version, g.policy_version), loc)
            t = self.followed(gid)
            if t is not None and t.admitted is not None:
                t.finished = (_version(ev.policy_version, _admitted_by(t)), loc)

    def sealed(self, ev) -> None:
        self.results(ev, True)

    def failed(self, ev) -> None:
        self.results(ev, False)

    def results(self, ev, sealing: bool) -> None:
        """A seal or a failure: the attempts it dispatched and, for a seal of a group ADMITTED
        at the point, taken after it or admitted after it, its result."""
        tail, dispatched = self.tail, KIND_OF[type(ev)].dispatched
        for ref in ev.rollouts:
            t = self.followed(ref.group_id)
            if t is not None:
                before = t.progress.pop(ref.index, None)
                if sealing:
                    t.sealed[ref.index] = _result(ev, ref, _admitted_by(t), before)
            g = self.live.get(ref.group_id)
            if g is None:
                continue
            key = (ref.group_id, ref.index)
            tail.attempts[key] = max(tail.attempts.get(key, 0), dispatched(ref))
            before = self.prefix_before(key, g)
            tail.progress.pop(key, None)
            self.ended.add(key)
            if sealing and g.owner == Owner.ADMITTED:
                tail.sealed[key] = _result(ev, ref, g.policy_version, before)

    def prefix_before(self, key: tuple[int, int], g) -> Progress | None:
        """The prefix rollout `key` of `g` (live at the point) holds so far: the tail's latest,
        else the one it held at the point unless the tail ended it."""
        p = self.tail.progress.get(key)
        if p is None and key not in self.ended and g.rollouts is not None:
            p = with_version(g.rollouts.progress_of(key[1]), g.policy_version)
        return p

    def progress(self, ev: RolloutProgress) -> None:
        """A prefix of a rollout of a group ADMITTED at the point, taken after it or admitted
        after it: the latest."""
        ref = ev.ref
        t = self.followed(ref.group_id)
        if t is not None:
            t.progress[ref.index] = _prefix(ev, _admitted_by(t), t.progress.get(ref.index))
        g = self.live.get(ref.group_id)
        if g is None:
            return
        key = (ref.group_id, ref.index)
        self.tail.attempts[key] = max(self.tail.attempts.get(key, 0), KIND_OF[type(ev)].dispatched(ref))
        if g.owner == Owner.ADMITTED:
            self.tail.progress[key] = _prefix(ev, g.policy_version, self.prefix_before(key, g))

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


def _version(recorded: int | None, admitted_by: int | None) -> int | None:
    """The policy version of a result: the one recorded, else the admitting weights'."""
    return recorded if recorded is not None else admitted_by


def _admitted_by(t: TailTake) -> int | None:
    return t.admitted.policy_version if t.admitted is not None else None


def _prefix(ev: RolloutProgress, admitted_by: int | None, before: Progress | None) -> Progress:
    """The prefix `ev` records, as the fold keeps it: it extends `before`, the one it supersedes."""
    ref = ev.ref
    return with_version(Progress(ref.locator, ev.tokens, ev.turn, *span_after(ev.policy_version, ev.since_version,
                                                                            before)), admitted_by)


def _result(ev, ref, admitted_by: int | None, before: Progress | None) -> tuple:
    """(policy version, locator, since) of seal `ev` of rollout `ref`, which completes `before`."""
    version, since = span_after(ev.policy_version, ev.since_version, before)
    return _version(version, admitted_by), ref.locator, since


# the kinds the reading follows, and what it does with each (the others say nothing it needs)
_READS = handlers({"taken": _Reading.taken, "admitted": _Reading.admitted, "diverted": _Reading.diverted,
                   "finished": _Reading.finished, "rollout_sealed": _Reading.sealed,
                   "rollout_failed": _Reading.failed, "rollout_progress": _Reading.progress,
                   "discarded": _Reading.discarded})


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
