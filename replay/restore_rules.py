"""What each live group at the restore point becomes, what the dead tail's takes become, and the
commit that records it.

The rules, in the order they apply:

0. **Completion**: a group ADMITTED at L with `rollouts=N` whose N rollouts are all sealed at
   L (its `finished` never journaled, or only after L) comes back as REPLAY, to train, and
   the first commit journals its `finished`: returned as ADMITTED it would have nothing to
   dispatch, and a trainer waiting for its generation would wait forever. Reported in
   `completed` (always on: it keeps nothing from after L, so it needs neither `salvage` nor a
   data plane; with a data plane, a group whose rows it lost is demoted instead, rule 2).
1. **Salvage** (opt-in, with a data plane): a group ADMITTED at L that finished after L,
   with weights within the bound (`policy_version <= step + max_policy_lag`: the trainer's
   own off-policy bound, DESIGN 14; 0 by default: no newer than the checkpoint) and its rows
   still in the data plane, comes back as REPLAY. The same holds per rollout: a rollout sealed
   after L under those conditions comes back sealed; a group whose rollouts are then all
   sealed comes back as REPLAY.
2. **Demotion** (with a data plane): a group whose rows the data plane no longer has (a
   REPLAY group, or a sealed rollout of any group) is regenerated under a fresh group id:
   the old id is dropped (`rows_lost_on_restore`), the new one admitted for the same step,
   its surviving rollouts sealed again; the lost rollouts are reported.
3. **Fencing**: every unsealed rollout of a recovered ADMITTED group gets an attempt above
   every attempt any history ever dispatched it in (the next one, unless a dead tail went
   further: restoring the same checkpoint twice must not hand out an attempt a dead run's
   worker may still hold), so a worker of a dead run that answers late cannot seal.
   A group waiting at L (RESERVED, SPARE) that a later history admitted comes back under a
   fresh id (the old one dropped, `reissued_on_restore`): that admission dispatched attempt 0
   of its rollouts, and an admission of the same id would hand attempt 0 out again. It comes
   back where it was, or, when the dead tail admitted it (read with salvage), where the
   tail's work on it allows, as an adopted take (rule 4): the workers of the dead run hold the
   old id's attempts, so the fence holds. Reported in `reissued`.
4. **Adoption** (with salvage, like rule 1, at a checkpoint): the loader's takes after L
   (`dead_tail.py`: in order, up to the last `taken` that carries a loader state) come back
   under fresh group ids, above every id any history used (the dead ids stay dead), with that
   last take's loader state, so the resumed loader goes on after them: none is taken twice,
   none lost. Each comes back where its work allows, as if it were taken on the resumed
   history: its rollouts sealed on the tail under rule 1's conditions are kept (sealed again
   under the new id, at attempt 0: nothing ever dispatched the new id), the others are pending
   at attempt 0; all of them kept: REPLAY (a group without `rollouts=`: REPLAY when its
   `finished` qualifies); admitted: ADMITTED; never admitted: RESERVED, or SPARE when
   diverted. Trained or dropped on the tail makes no difference: the dead history's decisions
   do not bind the resumed one (its weights never saw that training). Re-admission is
   demotion's (rule 2), once per group.

5. **Prefixes** (`rollout_progress`): each pending rollout of a recovered ADMITTED group
   continues from its latest durable prefix: the one the dead tail recorded, when rule 1's
   conditions hold for it (weights no newer than the checkpoint, its row still in the data
   plane), else the one at L, when its row is still there (with a data plane); an adopted
   group's pending rollouts likewise from the tail's. The first commit records the prefix
   again under the attempt the rollout is dispatched with now (after rule 3's fences; for a
   demoted or adopted group under its new id, at attempt 0), so the resumed history hands it
   on if it crashes before the rollout goes further.

A result or prefix recorded without a policy version counts as made by the weights that
admitted its group (`dead_tail.py`, `RecoveredGroup.of`). Work by weights beyond the bound is
never kept (it regenerates): `beyond_lag` names each item so dropped, its version and the
bound. Every item handed back says how it was made (`policy_span`, `lead`; counted by lead in
`kept_by_lead`).

**Regeneration** (`regenerate`: the run identity changed and the caller asked for
`on_identity_changed="regenerate"`) applies before the rules: every group holding generated
work (REPLAY, a sealed rollout, or a prefix) is regenerated under a fresh id as rule 2 demotes one
(dropped with `identity_changed_on_restore`), none of its results kept; its place in the
ownership (taken, admitted for its step) and the loader position stay. The caller reads no
dead tail then: nothing generated after L is salvaged, nothing taken after it adopted.

`first_commit` is the list of events the resume writes first, so that the journal says
exactly what the trainer was handed; `loader` and `first_commit_blobs` the loader state it
carries when takes were adopted. The rules record it through the journal's own calls, on
drafts (`journal.transaction.Draft`: each call checks its arguments and builds its event as a
transaction's does), one per part of the commit in the order it holds them: the checkpoints
marked committed again, what rules 0 and 1 keep, the fences and the prefixes carried on, the
demotions and reissues, the adoption. Nothing here writes: the writer that opens with the plan
commits it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from journal import GroupRef, KeptAtLead, Owner, Progress, Restored, RolloutRef, State
from journal.state import LoaderState, span_of
from journal.transaction import Draft
from snapshot import DataPlane
from snapshot.row_ledger import ABANDONED_ON_RESTORE

from .dead_tail import DeadTail, TailTake
from .recovered_state import BeyondLag, KeptWork, RecoveredGroup, RecoveredRollout, sealed_span

ROWS_LOST = "rows_lost_on_restore"
IDENTITY_CHANGED = "identity_changed_on_restore"  # the drop reason of a regenerated group
REISSUED = "reissued_on_restore"  # the drop reason of a waiting group a dead history admitted
ABANDONED = ABANDONED_ON_RESTORE  # the reason of a resume's fences (the audit counts them)


@dataclass
class Recovery:
    """The groups by owner after the rules, and the first commit that records them."""

    reserved: list[RecoveredGroup] = field(default_factory=list)
    admitted: list[RecoveredGroup] = field(default_factory=list)
    replay: list[RecoveredGroup] = field(default_factory=list)
    spare: list[RecoveredGroup] = field(default_factory=list)
    salvaged: list[RecoveredGroup] = field(default_factory=list)
    completed: list[RecoveredGroup] = field(default_factory=list)
    demoted: list[RecoveredGroup] = field(default_factory=list)
    adopted: list[RecoveredGroup] = field(default_factory=list)
    salvaged_rollouts: list[tuple[int, int]] = field(default_factory=list)
    lost_rollouts: list[tuple[int, int]] = field(default_factory=list)
    adopted_rollouts: list[tuple[int, int]] = field(default_factory=list)
    beyond_lag: list[BeyondLag] = field(default_factory=list)
    kept_by_lead: dict[int, KeptWork] = field(default_factory=dict)
    regenerated: list[RecoveredGroup] = field(default_factory=list)
    reissued: list[RecoveredGroup] = field(default_factory=list)
    dropped_rollouts: list[tuple[int, int]] = field(default_factory=list)  # (old group, index)
    salvaged_progress: list[tuple[int, int]] = field(default_factory=list)  # see RecoveredState
    lost_progress: list[tuple[int, int]] = field(default_factory=list)
    dropped_progress: list[tuple[int, int]] = field(default_factory=list)
    loader: LoaderState | None = None  # the adopted takes' loader state (None: the point's)
    first_commit: list = field(default_factory=list)
    first_commit_blobs: dict[bytes, bytes] = field(default_factory=dict)


def _usable(entry: tuple | None, limit: int, data_plane: DataPlane) -> bool:
    """A result from the dead tail that may be kept: weights within the bound `limit` (the
    checkpoint's step plus the lag) and its row still in the data plane."""
    if entry is None:
        return False
    pv, loc = entry[0], entry[1]
    return pv is not None and pv <= limit and loc is not None and data_plane.has(loc)


class _Plan:
    """Builds the recovery group by group (each rule one method)."""

    def __init__(self, step: int | None, tail: DeadTail | None, data_plane: DataPlane | None,
                 next_free_id: Callable[[], int], lag: int, draft: Callable[[], Draft]):
        self.tail, self.data_plane, self.step = tail, data_plane, step
        self.limit = step + lag if step is not None else -1  # the newest version kept
        self.next_free_id = next_free_id
        self.out = Recovery()
        self.keep = draft()  # what rules 0 and 1 keep: rollouts sealed again, groups finished
        self.fenced: list[RecoveredGroup] = []  # admitted groups whose pending rollouts get new attempts
        self.demotions = draft()  # demoted and reissued groups under their fresh ids
        self.adoption = draft()

    def beyond(self, gid: int, index: int | None, kind: str, version: int | None, locator: str | None) -> bool:
        """Whether work of `version` (its row at `locator`) is beyond the bound; if so it is
        reported in `beyond_lag`."""
        if version is None or version <= self.limit:
            return False
        self.out.beyond_lag.append(BeyondLag(gid, index, kind, version, self.limit, locator))
        return True

    def kept(self, entry: tuple | None, gid: int, index: int) -> bool:
        """Whether the dead tail's seal `entry` of rollout (`gid`, `index`) is kept."""
        return entry is not None and not self.beyond(gid, index, "rollout", entry[0], entry[1]) \
            and _usable(entry, self.limit, self.data_plane)

    def kept_group(self, entry: tuple | None, gid: int) -> bool:
        """Whether the dead tail's `finished` `entry` of group `gid` (admitted without
        rollouts=) is kept."""
        return entry is not None and not self.beyond(gid, None, "group", *entry) \
            and _usable(entry, self.limit, self.data_plane)

    def salvage_rollouts(self, g: RecoveredGroup) -> int:
        """Seal the pending rollouts of `g` that the dead tail sealed usably; how many."""
        if self.tail is None or self.data_plane is None:
            return 0
        kept = 0
        for r in g.pending:
            entry = self.tail.sealed.get((g.group_id, r.index))
            if self.kept(entry, g.group_id, r.index) and g.group_id not in self.tail.dropped:
                r.sealed, r.progress = True, None  # the seal ends it
                r.policy_version, r.locator, r.policy_span = entry[0], entry[1], sealed_span(entry[0], entry[2])
                _seal_again(self.keep, g.group_id, r, r.attempt)
                self.out.salvaged_rollouts.append((g.group_id, r.index))
                kept += 1
        return kept

    def prefix_kept(self, p: Progress, key: tuple[int, int], recorded_after: bool) -> bool:
        """Whether prefix `p` of rollout `key` may be continued: never one by weights beyond
        the bound (reported in `beyond_lag`); its row still in the data plane (one recorded at
        the point that lost it: `lost_progress`); one recorded after the point only under the
        salvage rule (known weights, a data plane)."""
        if self.beyond(*key, "prefix", p.policy_version, p.locator):
            return False
        if recorded_after:
            return _usable((p.policy_version, p.locator), self.limit, self.data_plane)
        if self.data_plane is not None and not self.data_plane.has(p.locator):
            self.out.lost_progress.append(key)
            return False
        return True

    def continue_from(self, g: RecoveredGroup) -> None:
        """Rule 5: the prefix each pending rollout of `g` continues from: the dead tail's
        latest when the salvage rule keeps it (`salvaged_progress`), else the one at the point
        when it may be continued, else none."""
        tail = self.tail if self.data_plane is not None else None
        for r in g.pending:
            key = (g.group_id, r.index)
            later = tail.progress.get(key) if tail is not None and g.group_id not in tail.dropped else None
            if later is not None and self.prefix_kept(later, key, recorded_after=True):
                r.progress = later
                self.out.salvaged_progress.append(key)
            elif r.progress is not None and not self.prefix_kept(r.progress, key, recorded_after=False):
                r.progress = None

    def rows_lost(self, g: RecoveredGroup) -> bool:
        """Whether the data plane lost rows the journal says `g` has (never when none is given)."""
        if self.data_plane is None:
            return False
        if g.rollouts is not None:
            lost = [r.index for r in g.rollouts
                    if r.sealed and r.locator is not None and not self.data_plane.has(r.locator)]
            self.out.lost_rollouts += [(g.group_id, i) for i in lost]
            return bool(lost)
        return g.owner == Owner.REPLAY and (g.locator is None or not self.data_plane.has(g.locator))

    @staticmethod
    def readmit(draft: Draft, g: RecoveredGroup) -> None:
        """Record into `draft` what brings `g`, under its fresh id, where it is: admitted for its
        target step (with `g.replaces`), its sealed rollouts sealed again at attempt 0 (nothing
        ever dispatched the new id), finished when it is REPLAY."""
        n = len(g.rollouts) if g.rollouts is not None else None
        draft.admitted([g.group_id], target_step=g.target_step, policy_version=g.policy_version,
                       replaces=g.replaces, rollouts=n)
        for r in g.rollouts or ():
            if r.sealed:
                _seal_again(draft, g.group_id, r, 0)
        _carry_progress(draft, [g])
        if g.owner == Owner.REPLAY:
            if n is not None:
                draft.finished([g.group_id])
            else:
                draft.finished([g.group_id], policy_version=g.policy_version, locators=[g.locator])

    def demote(self, g: RecoveredGroup, reason: str = ROWS_LOST, report: list | None = None) -> None:
        """Regenerate `g` under a fresh id, the old one dropped with `reason`; its surviving
        rollouts (sealed, their rows in the data plane: a seal an older journal recorded without
        a locator has no row to keep) are sealed again there. Reported in `report` (default:
        `demoted`)."""
        if g.rollouts is not None:  # a new group: every attempt starts at 0, the survivors sealed
            g.rollouts = [RecoveredRollout(r.index, 0, True, r.locator, r.policy_version, policy_span=r.policy_span)
                          if r.sealed and r.locator is not None and self.data_plane.has(r.locator)
                          else RecoveredRollout(r.index, 0, False, progress=None if r.sealed else r.progress)
                          for r in g.rollouts]
        g.replaces, g.owner, g.locator = self.retake(g, reason), Owner.ADMITTED, None
        self.readmit(self.demotions, g)
        (self.out.demoted if report is None else report).append(g)
        self.out.admitted.append(g)

    def retake(self, g: RecoveredGroup, reason: str) -> int:
        """Give `g` a fresh id: its old one dropped with `reason`, its row taken again under the
        new one in the same commit. Returns the old id."""
        old, g.group_id = g.group_id, self.next_free_id()
        self.demotions.discarded([old], reason=reason)
        self.demotions.taken([GroupRef(g.idx, g.task_name, g.epoch, g.fingerprint, g.group_id)])
        return old

    def reissue(self, state: State, admitted_ever: Callable[[set], set]) -> None:
        """Rule 3 for the waiting groups: those a later history admitted, under fresh ids; one
        the dead tail admitted (read with salvage) where its work there allows, as an adopted
        take (rule 4)."""
        out = self.out
        waiting = out.reserved + out.spare
        again = admitted_ever({g.group_id for g in waiting})
        work = self.tail.waiting if self.tail is not None and self.data_plane is not None else {}
        for g in waiting:
            if g.group_id not in again:
                continue
            t = work.get(g.group_id)
            self.retake(g, REISSUED)
            if t is not None:
                self.follow_tail(g, t, self.known_replaced(t, {}, state))
                self.readmit(self.demotions, g)
            elif g.owner == Owner.SPARE:
                self.demotions.diverted([g.group_id])
            out.reissued.append(g)
        moved = [g for g in out.reissued if g.owner in (Owner.ADMITTED, Owner.REPLAY)]
        out.reserved = [g for g in out.reserved if g.owner == Owner.RESERVED]
        out.spare = [g for g in out.spare if g.owner == Owner.SPARE]
        out.admitted += [g for g in moved if g.owner == Owner.ADMITTED]
        out.replay += [g for g in moved if g.owner == Owner.REPLAY]

    def regenerate(self, g: RecoveredGroup) -> None:
        """Drop the work of `g` (its rows, its sealed rollouts) and regenerate it under a fresh id."""
        self.out.dropped_rollouts += [(g.group_id, r.index) for r in g.rollouts or () if r.sealed]
        self.out.dropped_progress += [(g.group_id, r.index) for r in g.rollouts or () if r.progress is not None]
        for r in g.rollouts or ():
            r.sealed, r.progress = False, None
        self.demote(g, IDENTITY_CHANGED, self.out.regenerated)

    def admitted_group(self, g: RecoveredGroup) -> None:
        salvaged = self.salvage_rollouts(g) > 0
        self.continue_from(g)
        if self.rows_lost(g):
            self.demote(g)
            return
        # the whole group finished on the dead tail (a group with rollouts: see salvage_rollouts)
        whole = self.tail.finished.get(g.group_id) if self.tail is not None and g.rollouts is None else None
        if whole is not None and self.data_plane is not None and g.group_id not in self.tail.dropped \
                and self.kept_group(whole, g.group_id):
            g.policy_version, g.locator = whole
            self.keep.finished([g.group_id], policy_version=g.policy_version, locators=[g.locator])
            self.out.salvaged.append(g)
        elif g.rollouts is not None and not g.pending:  # every rollout sealed: rule 0, or 1 for its last
            self.keep.finished([g.group_id])
            (self.out.salvaged if salvaged else self.out.completed).append(g)
        else:
            self.out.admitted.append(g)
            self.fenced.append(g)
            return
        g.owner = Owner.REPLAY

    def replay_group(self, g: RecoveredGroup) -> None:
        if self.rows_lost(g):
            self.demote(g)
        else:
            self.out.replay.append(g)

    def adopt(self, state: State) -> None:
        """Rule 4: the dead tail's takes, under fresh ids (allocated in take order, after the
        demoted groups'), each where its work allows; one `taken` with their loader state."""
        tail = self.tail
        if tail is None or self.data_plane is None or self.step is None or not tail.takes:
            return  # without a checkpoint, the state is empty: nothing is restored, nothing adopted
        new_ids = {t.group.group_id: self.next_free_id() for t in tail.takes}
        groups = [self.adopted_group(t, new_ids, state) for t in tail.takes]
        self.adoption.taken([GroupRef(g.idx, g.task_name, g.epoch, g.fingerprint, g.group_id) for g in groups],
                            loader_state=tail.loader, dataset_size=tail.dataset_size)
        spares = [g.group_id for g in groups if g.owner == Owner.SPARE]
        if spares:
            self.adoption.diverted(spares)
        out = self.out
        for g in groups:
            if g.owner in (Owner.ADMITTED, Owner.REPLAY):
                self.readmit(self.adoption, g)
            {Owner.RESERVED: out.reserved, Owner.SPARE: out.spare, Owner.ADMITTED: out.admitted,
             Owner.REPLAY: out.replay}[g.owner].append(g)
        out.adopted, out.loader = groups, tail.loader

    def adopted_group(self, t: TailTake, new_ids: dict[int, int], state: State) -> RecoveredGroup:
        """The group of take `t` under its new id, where its work on the dead tail allows."""
        tg = t.group
        g = RecoveredGroup(new_ids[tg.group_id], tg.idx, tg.task_name, tg.epoch, tg.fingerprint,
                           Owner.SPARE if t.diverted else Owner.RESERVED, adopted_from=tg.group_id)
        if t.admitted is not None:
            self.follow_tail(g, t, self.known_replaced(t, new_ids, state))
        return g

    @staticmethod
    def known_replaced(t: TailTake, new_ids: dict[int, int], state: State) -> int | None:
        """The group the tail's admission of `t` replaces, as the resumed history knows it: an
        adopted group by its new id (`new_ids`), one known at the point by its id, a group only
        the dead tail knew not at all."""
        replaced = t.admitted.replaces
        return new_ids.get(replaced, replaced if replaced is not None and
                           state.owner_of(replaced) is not None else None)

    def follow_tail(self, g: RecoveredGroup, t: TailTake, replaces: int | None) -> None:
        """`g`, under its fresh id, admitted as the dead tail admitted take `t` (replacing
        `replaces`), with the tail's work on it that the rules keep: its seals (sealed again at
        attempt 0: nothing ever dispatched the fresh id; REPLAY once all are), the others'
        latest prefixes, pending at attempt 0; the rows of a group without rollouts= when its
        `finished` qualifies (then REPLAY)."""
        admission, dead = t.admitted, t.group.group_id
        g.replaces = replaces
        g.owner, g.target_step, g.policy_version = Owner.ADMITTED, admission.target_step, admission.policy_version
        if admission.rollouts is None:
            if self.kept_group(t.finished, dead):
                g.owner, (g.policy_version, g.locator) = Owner.REPLAY, t.finished
            return
        g.rollouts = []
        for i in range(admission.rollouts):
            entry = t.sealed.get(i)
            if self.kept(entry, dead, i):
                g.rollouts.append(RecoveredRollout(i, 0, True, entry[1], entry[0],
                                                   policy_span=sealed_span(entry[0], entry[2])))
                self.out.adopted_rollouts.append((g.group_id, i))
            else:
                later = t.progress.get(i)
                kept = later is not None and self.prefix_kept(later, (dead, i), recorded_after=True)
                g.rollouts.append(RecoveredRollout(i, 0, False, progress=later if kept else None))
                if kept:
                    self.out.salvaged_progress.append((dead, i))
        if not g.pending:
            g.owner = Owner.REPLAY


def _fence(draft: Draft, groups: list[RecoveredGroup], attempts_used: Callable[[set], dict]) -> None:
    """Raise the attempt of every pending rollout of `groups` above every attempt it was ever
    dispatched in; record the `rollout_failed` that say so into `draft`, one round per step up
    (a failure raises an attempt by one)."""
    pending = {(g.group_id, r.index): r for g in groups for r in g.pending}
    if not pending:
        return
    used = attempts_used(set(pending))
    start = {key: r.attempt for key, r in pending.items()}
    for key, r in pending.items():
        r.attempt = max(r.attempt, used.get(key, 0)) + 1
    for k in range(max(r.attempt - start[key] for key, r in pending.items())):
        draft.rollout_failed([RolloutRef(gid, index, start[(gid, index)] + k)
                              for (gid, index), r in pending.items() if start[(gid, index)] + k < r.attempt],
                             reason=ABANDONED)


def restore_record(out: Recovery, *, point: int, step: int | None, crash_lsn: int, lag: int,
                   data_plane: DataPlane | None) -> Restored:
    """The journal's record of this restore (`journal.Restored`, in the resume's first commit):
    what it kept by lead, what it dropped by reason, what it hands back to generate, and the
    generation seconds of the results dropped beyond the bound whose rows say how long they
    took (a mapping row with "seconds", read from `data_plane`)."""
    dropped = {"beyond_lag": len(out.beyond_lag),
               "rows_lost": len(out.lost_rollouts) + len(out.lost_progress)
               + sum(1 for g in out.demoted if g.rollouts is None),
               "identity": len(out.dropped_rollouts) + len(out.dropped_progress)
               + sum(1 for g in out.regenerated if g.rollouts is None)}
    regenerate = sum(len(g.pending) if g.rollouts is not None else 1 for g in out.admitted)
    kept = [KeptAtLead(lead, w.groups, w.rollouts, w.prefixes, w.tokens) for lead, w in out.kept_by_lead.items()]
    return Restored(point, step, crash_lsn, time.time(), lag, kept, {k: n for k, n in dropped.items() if n},
                    regenerate, _seconds_of([b.locator for b in out.beyond_lag], data_plane))


def _seconds_of(locators: list[str | None], data_plane: DataPlane | None) -> float | None:
    """The generation seconds the rows at `locators` record (a mapping row's "seconds": a number
    or a one-element tensor), summed over those that do; None when none does."""
    get = getattr(data_plane, "get", None)
    found = []
    for loc in locators:
        if get is None or loc is None or not data_plane.has(loc):
            continue
        row = get(loc)
        seconds = row.get("seconds") if isinstance(row, dict) else None
        if seconds is not None:
            found.append(float(seconds))
    return sum(found) if found else None


def _span(versions: list[int | None]) -> tuple[int, int] | None:
    known = [v for v in versions if v is not None]
    return (min(known), max(known)) if known else None


def _leads(groups: list[RecoveredGroup], step: int | None) -> dict[int, KeptWork]:
    """Set the `policy_span` and `lead` of every rollout and group of `groups` that keeps
    generated work (a sealed rollout's row, a prefix, a group's rows), and count that work by
    lead (newest version minus `step`; 0 for work of the restored weights or older)."""
    kept: dict[int, KeptWork] = {}

    def lead_of(span: tuple[int, int] | None) -> int | None:
        return span[1] - step if span is not None and step is not None else None

    def count(lead: int | None) -> KeptWork:
        return kept.setdefault(max(lead or 0, 0), KeptWork())

    for g in groups:
        spans = []
        for r in g.rollouts or ():
            if r.sealed:
                r.policy_span = r.policy_span or _span([r.policy_version])
                count(lead_of(r.policy_span)).rollouts += 1
            elif r.progress is not None:
                r.policy_span = _span(list(span_of(r.progress)))
                work = count(lead_of(r.policy_span))
                work.prefixes += 1
                work.tokens += r.progress.tokens
            else:
                continue
            r.lead = lead_of(r.policy_span)
            spans.append(r.policy_span)
        if g.rollouts is None and g.owner == Owner.REPLAY:
            spans.append(_span([g.policy_version]))
            count(lead_of(spans[-1])).groups += 1
        g.policy_span = _span([v for span in spans if span is not None for v in span])
        g.lead = lead_of(g.policy_span)
    return dict(sorted(kept.items()))


def _carry_progress(draft: Draft, groups: list[RecoveredGroup]) -> None:
    """Record into `draft` the `rollout_progress` that hands each pending rollout of `groups`
    that continues from a prefix that prefix again (its span with it), under the attempt it is
    dispatched with now."""
    for g in groups:
        for r in g.pending:
            p = r.progress
            if p is not None:
                draft.rollout_progress(RolloutRef(g.group_id, r.index, r.attempt, p.locator), tokens=p.tokens,
                                       turn=p.turn, policy_version=p.policy_version, since_version=p.since)


def _seal_again(draft: Draft, gid: int, r: RecoveredRollout, attempt: int) -> None:
    """Record into `draft` the `rollout_sealed` that seals kept rollout `r` of group `gid` (at
    `attempt`) again, its span with it."""
    since = r.policy_span[0] if r.policy_span is not None and r.policy_span[0] != r.policy_span[1] else None
    draft.rollout_sealed([RolloutRef(gid, r.index, attempt, r.locator)], policy_version=r.policy_version,
                         since_version=since)


def recover(state: State, step: int | None, *, path: str, tail: DeadTail | None, data_plane: DataPlane | None,
            recommit: list[int], next_free_id: Callable[[], int],
            attempts_used: Callable[[set], dict], admitted_ever: Callable[[set], set],
            regenerate: bool = False, lag: int = 0) -> Recovery:
    """Apply the rules to every live group of `state` (the state at the restore point of the
    journal at `path`) and to the takes of `tail` (read only with salvage). `next_free_id()`
    hands out the ids of demoted and adopted groups (beyond every id ever used);
    `attempts_used(rollouts)` says how far any history took each rollout's attempts,
    `admitted_ever(groups)` which of the groups any history admitted; `regenerate`: drop every
    generated result first (see the module docstring); `lag`: the trainer's `max_policy_lag`
    (work by weights up to `step + lag` is kept)."""
    def draft() -> Draft:
        return Draft(state, path)

    plan = _Plan(step, tail, data_plane, next_free_id, lag, draft)
    out = plan.out
    for g in map(RecoveredGroup.of, state.groups()):
        if regenerate and (g.owner == Owner.REPLAY
                           or any(r.sealed or r.progress is not None for r in g.rollouts or ())):
            plan.regenerate(g)
        elif g.owner == Owner.ADMITTED:
            plan.admitted_group(g)
        elif g.owner == Owner.REPLAY:
            plan.replay_group(g)
        elif g.owner == Owner.RESERVED:
            out.reserved.append(g)
        else:
            out.spare.append(g)
    out.replay += sorted(out.salvaged + out.completed, key=lambda g: g.group_id)
    plan.reissue(state, admitted_ever)
    plan.adopt(state)
    out.kept_by_lead = _leads(out.reserved + out.admitted + out.replay + out.spare, step)
    out.admitted.sort(key=lambda g: (g.target_step if g.target_step is not None else -1, g.group_id))
    marks, fences = draft(), draft()
    for s in recommit:
        marks.commit_checkpoint(step=s)
    _fence(fences, plan.fenced, attempts_used)
    _carry_progress(fences, plan.fenced)
    parts = (marks, plan.keep, fences, plan.demotions, plan.adoption)
    out.first_commit = [ev for part in parts for ev in part.events]
    out.first_commit_blobs = {d: b for part in parts for d, b in part.blobs.items()}
    return out
