"""The recovery rules written again for the tests (docs/recovery.md, "Restoring" steps 5 and 6), without
the library's code: what a restore with salvage and a data plane hands back, and the first
commit a resume writes, from the history alone.

The input is the active history as commits of journal events, each with the loader states of
its `taken` events (as objects, one per `taken`, None for none: `crash_oracle.Run.expected`), the restore point L (an LSN), its step, the data
plane's `has`, the attempts any history dispatched and the groups it admitted (as read off the
disk) and the fresh ids the
restore allocated (`expected_recovery` checks only their number; that they are fresh is the
caller's check). The groups live at L come from `journal_model.Model` (owners, rollouts); the
facts the rules need besides (rows, admissions, finishes) from one pass of its own here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from journal import (Admitted, Discarded, Diverted, Finished, Owner, Progress, RolloutFailed, RolloutProgress,
                     RolloutRef, RolloutSealed, Taken, TakenGroup)
from replay.restore_rules import ABANDONED, REISSUED, ROWS_LOST
from tests.support.journal_model import Model

A, P = Owner.ADMITTED, Owner.REPLAY


def reissued_order(owners: dict, admitted_ever: set) -> list[int]:
    """Rule 3 for the groups waiting at the point: those any history admitted, in the order
    restore gives them fresh ids (reserved, then spare, each by id)."""
    return [gid for owner in (Owner.RESERVED, Owner.SPARE)
            for gid in sorted(g for g, o in owners.items() if o == owner and g in admitted_ever)]


@dataclass
class Facts:
    """What the history says of one group besides its owner: its row, its admission, and its
    policy version and locator as the fold keeps them (a finish's version, else the admission's)."""

    row: TakenGroup
    target_step: int | None = None
    admitted_pv: int | None = None
    replaces: int | None = None
    n: int | None = None
    pv: int | None = None
    locator: str | None = None
    diverted: bool = False
    finished: tuple | None = None          # (pv, locator) of a `finished` on the dead tail
    sealed: dict = field(default_factory=dict)  # index -> (pv, locator, since) of seals on the dead tail
    progress: dict = field(default_factory=dict)  # index -> the tail's latest Progress no seal or failure ended
    ended: set = field(default_factory=set)  # indices whose prefix at the point the tail ended


@dataclass
class Expected:
    """What the restore hands back: owner and rollouts (index, attempt, sealed, locator,
    policy_version, progress) of every group by id, the groups demoted (old ids) and adopted (dead ids)
    in allocation order, the loader state (`has_loader`: one is handed back) and the first
    commit without its checkpoint markers (a `taken` of adopted groups compared without its
    loader state, which `loader` stands for)."""

    owners: dict = field(default_factory=dict)
    rollouts: dict = field(default_factory=dict)
    demoted_from: list = field(default_factory=list)
    adopted_from: list = field(default_factory=list)
    loader: object = None
    has_loader: bool = False
    first_commit: list = field(default_factory=list)


def _facts(commits: list) -> dict[int, Facts]:
    """Group id -> Facts of every group `commits` took, the tail's results not yet set."""
    facts: dict[int, Facts] = {}
    for events, _ in commits:
        for ev in events:
            t = type(ev)
            if t is Taken:
                for g in ev.groups:
                    facts[g.group_id] = Facts(g)
            elif t is Admitted:
                for gid in ev.groups:
                    f = facts[gid]
                    f.target_step, f.admitted_pv, f.pv, f.replaces, f.n = (
                        ev.target_step, ev.policy_version, ev.policy_version, ev.replaces, ev.rollouts)
            elif t is Finished:
                for i, gid in enumerate(ev.groups):
                    f = facts[gid]
                    f.pv = ev.policy_version if ev.policy_version is not None else f.pv
                    f.locator = ev.locators[i] if ev.locators is not None else None
    return facts


class _Rules:
    def __init__(self, at: Model, commits: list, point: int, step: int, has, used: dict, new_ids: list,
                 lag: int = 0):
        self.at, self.point, self.step, self.has, self.used = at, point, step, has, used
        self.bound = step + lag  # the newest policy version kept (`max_policy_lag`)
        self.facts = _facts(commits[:point])
        self.tail = commits[point:]
        self.fresh = iter(new_ids)
        self.out = Expected()
        self.keep, self.demotions, self.fenced = [], [], []
        self.dropped: set[int] = set()

    def usable(self, entry) -> bool:
        return entry is not None and entry[0] is not None and entry[0] <= self.bound \
            and entry[1] is not None and self.has(entry[1])

    def read_tail(self) -> None:
        """The tail's results for the groups live at L; what it did with a group waiting at L
        that it admitted, under its id or a re-take of its row (`self.waiting`)."""
        live = self.at.live()
        rows = {gid: (f.row.epoch, f.row.task_name, f.row.idx) for gid, f in self.facts.items()}
        self.waiting: dict[int, Facts] = {}
        alias: dict[int, int] = {}  # a re-take's id -> the waiting group whose row it took
        for events, loaders in self.tail:
            dropped = {rows[gid]: gid for ev in events if type(ev) is Discarded for gid in ev.groups
                       if gid in rows}
            for ev in events:
                t = type(ev)
                if t is Taken and ev.loader_state is None:
                    alias.update((g.group_id, dropped[(g.epoch, g.task_name, g.idx)]) for g in ev.groups
                                 if (g.epoch, g.task_name, g.idx) in dropped)
                elif t is Admitted:
                    for gid in ev.groups:
                        at = alias.get(gid, gid)
                        if live.get(at) in (Owner.RESERVED, Owner.SPARE):
                            w = self.waiting[at] = Facts(self.facts[at].row)
                            w.target_step, w.admitted_pv, w.replaces, w.n = (
                                ev.target_step, ev.policy_version, ev.replaces, ev.rollouts)
                            alias[gid] = at
                _follow_event(self.waiting, alias, ev)
                if t is Finished:
                    for i, gid in enumerate(ev.groups):
                        if live.get(gid) == A:
                            f = self.facts[gid]
                            f.finished = (ev.policy_version if ev.policy_version is not None else f.pv,
                                          ev.locators[i] if ev.locators is not None else None)
                elif t is RolloutSealed or t is RolloutFailed:
                    for r in ev.rollouts:
                        if live.get(r.group_id) == A:
                            _ended(self.facts[r.group_id], ev, r, self.at_point(r.group_id, r.index))
                elif t is RolloutProgress:
                    r = ev.ref
                    if live.get(r.group_id) == A:
                        _prefix(self.facts[r.group_id], ev, self.at_point(r.group_id, r.index))
                elif t is Discarded:
                    self.dropped.update(ev.groups)

    def prefix(self, gid: int, index: int, f: Facts) -> Progress | None:
        """Rule 5: what an unsealed rollout continues from: the tail's latest under the
        salvage rule, else the one at L while its row is there; never one beyond the bound."""
        later = f.progress.get(index) if gid not in self.dropped else None
        if later is not None and self.usable((later.policy_version, later.locator)):
            return later
        at = self.at_point(gid, index)
        if at is None or at.policy_version is not None and at.policy_version > self.bound or not self.has(at.locator):
            return None
        return at

    def at_point(self, gid: int, index: int) -> Progress | None:
        """The prefix rollout `index` of `gid` held at L (recorded without a version: its group's)."""
        at = self.at.progress.get((gid, index))
        return None if at is None else Progress(at[0], at[1], at[2], _version(at[3], self.facts[gid].pv), at[4])

    def live_group(self, gid: int, owner: Owner) -> None:
        f = self.facts[gid]
        rollouts = None
        if gid in self.at.rollouts:
            attempts, sealed = self.at.rollouts[gid]
            # [attempt, sealed, locator, version, prefix, since]
            rollouts = {i: [a, True, sealed[i][0], _version(sealed[i][1], f.pv), None, sealed[i][2]] if i in sealed
                        else [a, False, None, None, None, None] for i, a in enumerate(attempts)}
        if owner == A and rollouts is not None:
            for i, r in rollouts.items():
                entry = f.sealed.get(i)
                if not r[1] and self.usable(entry) and gid not in self.dropped:
                    r[1:4], r[5] = [True, entry[1], entry[0]], entry[2]
                    self.keep.append(RolloutSealed([RolloutRef(gid, i, r[0], entry[1])], entry[0], entry[2]))
                elif not r[1]:
                    r[4] = self.prefix(gid, i, f)
        if self.rows_lost(f, owner, rollouts):
            return self.demote(gid, f, rollouts)
        if owner == A and rollouts is None and f.finished is not None and gid not in self.dropped \
                and self.usable(f.finished):
            owner = P
            self.keep.append(Finished([gid], f.finished[0], [f.finished[1]]))
        elif owner == A and rollouts is not None and all(r[1] for r in rollouts.values()):
            owner = P
            self.keep.append(Finished([gid]))
        elif owner == A and rollouts is not None:
            self.fenced.append((gid, rollouts))
        self.out.owners[gid] = owner
        self.out.rollouts[gid] = rollouts

    def rows_lost(self, f: Facts, owner: Owner, rollouts) -> bool:
        if rollouts is not None:
            return any(r[1] and r[2] is not None and not self.has(r[2]) for r in rollouts.values())
        return owner == P and (f.locator is None or not self.has(f.locator))

    def demote(self, old: int, f: Facts, rollouts) -> None:
        new = next(self.fresh)
        self.out.demoted_from.append(old)
        kept = {} if rollouts is None else {
            i: r for i, r in rollouts.items() if r[1] and (r[2] is None or self.has(r[2]))}
        self.demotions += [Discarded([old], ROWS_LOST),
                           Taken([TakenGroup(new, f.row.idx, f.row.task_name, f.row.epoch, f.row.fingerprint)]),
                           Admitted([new], f.target_step, f.pv, old, f.n)]
        self.demotions += [RolloutSealed([RolloutRef(new, i, 0, r[2])], r[3], r[5]) for i, r in kept.items()]
        self.out.owners[new] = A
        self.out.rollouts[new] = None if rollouts is None else {
            i: [0, True, *kept[i][2:4], None, kept[i][5]] if i in kept else
            [0, False, None, None, None if r[1] else r[4], None] for i, r in rollouts.items()}
        self.demotions += _carried(new, self.out.rollouts[new])

    def reissue(self, admitted_ever: set) -> None:
        """Rule 3 for the waiting groups: a fresh id each; one the dead tail admitted, where its
        work there allows (`follow`), else where it was."""
        for old in reissued_order(self.out.owners, admitted_ever):
            new, row = next(self.fresh), self.facts[old].row
            self.out.owners[new], self.out.rollouts[new] = self.out.owners.pop(old), self.out.rollouts.pop(old)
            self.demotions += [Discarded([old], REISSUED),
                               Taken([TakenGroup(new, row.idx, row.task_name, row.epoch, row.fingerprint)])]
            w = self.waiting.get(old)
            if w is not None:
                rep = w.replaces if w.replaces in self.facts else None
                self.demotions += follow(self, self.out, w, new, rep)
            elif self.out.owners[new] == Owner.SPARE:
                self.demotions.append(Diverted([new]))

    def fence(self) -> list:
        targets = []
        for gid, rollouts in self.fenced:
            for i, r in rollouts.items():
                if not r[1]:
                    new = max(r[0], self.used.get((gid, i), 0)) + 1
                    targets.append((gid, i, r[0], new))
                    r[0] = new
        rounds = max((new - a for _, _, a, new in targets), default=0)
        return [RolloutFailed([RolloutRef(g, i, a + k) for g, i, a, new in targets if a + k < new], ABANDONED)
                for k in range(rounds)] + [e for gid, rollouts in self.fenced for e in _carried(gid, rollouts)]


def _version(recorded, admitted_by):
    """A result's policy version: the one recorded, else that of the weights that admitted its group."""
    return recorded if recorded is not None else admitted_by


def _before(f: Facts, index: int, at_point: Progress | None) -> Progress | None:
    """The prefix a tail's event on rollout `index` extends: the tail's latest, else the one at
    the point (`at_point`) unless the tail ended it."""
    p = f.progress.get(index)
    return p if p is not None or index in f.ended else at_point


def _span(f: Facts, version, given, before: Progress | None) -> tuple:
    """(version, since) of work recorded with `version` and `given` (its since_version) that
    extends `before`: the newest of every version known (none known: the admission's) and,
    when older, the oldest."""
    known = [v for v in (version, given, *((before.since, before.policy_version) if before is not None else ()))
             if v is not None]
    if not known:
        return f.admitted_pv, None
    return max(known), (min(known) if min(known) < max(known) else None)


def _ended(f: Facts, ev, ref, at_point: Progress | None = None) -> None:
    """A seal or a failure of the tail: it ends the rollout's prefix; a seal's result is kept,
    spanning the prefix it completes."""
    before = _before(f, ref.index, at_point)
    f.progress.pop(ref.index, None)
    f.ended.add(ref.index)
    if type(ev) is RolloutSealed:
        v, since = _span(f, ev.policy_version, ev.since_version, before)
        f.sealed[ref.index] = (v, ref.locator, since)


def _prefix(f: Facts, ev: RolloutProgress, at_point: Progress | None = None) -> None:
    r = ev.ref
    f.progress[r.index] = Progress(r.locator, ev.tokens, ev.turn,
                                   *_span(f, ev.policy_version, ev.since_version, _before(f, r.index, at_point)))


def _follow_event(work: dict, alias: dict, ev) -> None:
    """A result, prefix or finish of the tail for a group whose work it follows (`work`, by the
    id the work is kept under; `alias`: the ids the tail named it by)."""
    t = type(ev)
    if t is RolloutSealed or t is RolloutFailed:
        for r in ev.rollouts:
            f = work.get(alias.get(r.group_id, r.group_id))
            if f is not None:
                _ended(f, ev, r)
    elif t is RolloutProgress:
        f = work.get(alias.get(ev.ref.group_id, ev.ref.group_id))
        if f is not None:
            _prefix(f, ev)
    elif t is Finished:
        for i, gid in enumerate(ev.groups):
            f = work.get(alias.get(gid, gid))
            if f is not None:
                f.finished = (_version(ev.policy_version, f.admitted_pv),
                              ev.locators[i] if ev.locators is not None else None)


def follow(rules: "_Rules", out: Expected, f: Facts, gid: int, rep) -> list:
    """A group the dead tail admitted (`f`: its work there) back under the fresh id `gid`,
    replacing `rep`, where that work allows (`out` gets its owner and rollouts); the events
    that readmit it."""
    owner, pv, loc = A, f.admitted_pv, None
    if f.n is not None:
        kept = {i: f.sealed[i] for i in range(f.n) if rules.usable(f.sealed.get(i))}
        prefixes = {i: p for i, p in f.progress.items() if rules.usable((p.policy_version, p.locator))}
        out.rollouts[gid] = {i: [0, True, kept[i][1], kept[i][0], None, kept[i][2]] if i in kept else
                             [0, False, None, None, prefixes.get(i), None] for i in range(f.n)}
        owner = P if len(kept) == f.n else A
    elif rules.usable(f.finished):
        owner, (pv, loc) = P, f.finished
    out.owners[gid] = owner
    events = [Admitted([gid], f.target_step, pv, rep, f.n)]
    events += [RolloutSealed([RolloutRef(gid, i, 0, r[2])], r[3], r[5])
               for i, r in (out.rollouts[gid] or {}).items() if r[1]]
    events += _carried(gid, out.rollouts[gid])
    if owner == P:
        events.append(Finished([gid]) if f.n is not None else Finished([gid], pv, [loc]))
    return events


def _carried(gid: int, rollouts: dict | None) -> list:
    """The prefixes a resume records again for `gid`'s pending rollouts, under their attempt."""
    return [RolloutProgress(RolloutRef(gid, i, r[0], r[4].locator), r[4].tokens, r[4].turn, r[4].policy_version,
                            r[4].since)
            for i, r in sorted((rollouts or {}).items()) if not r[1] and r[4] is not None]


def _adoptable(tail: list, live_rows: dict) -> tuple[list[TakenGroup], dict, object, int | None]:
    """The loader's takes of `tail` up to the last with a loader state (a take without one of a
    row its own commit dropped is a demotion's re-take), what the tail did with each, that
    loader state and the dataset size last recorded by then."""
    rows = dict(live_rows)  # group id -> row, of every group known so far
    takes, work, upto, loader, size, size_then = [], {}, 0, None, None, None
    for events, loaders in tail:
        dropped_rows, li = set(), iter(loaders)
        for ev in events:
            t = type(ev)
            if t is Taken:
                state = next(li, None)
                for g in ev.groups:
                    rows[g.group_id] = (g.epoch, g.task_name, g.idx)
                    if state is None and rows[g.group_id] in dropped_rows:
                        continue
                    takes.append(g)
                    work[g.group_id] = Facts(g)
                size = ev.dataset_size if ev.dataset_size is not None else size
                if state is not None:
                    upto, loader, size_then = len(takes), state, size
            elif t is Discarded:
                dropped_rows.update(rows.get(gid) for gid in ev.groups)
            elif t is Diverted:
                for gid in ev.groups:
                    if gid in work:
                        work[gid].diverted = True
            elif t is Admitted:
                for gid in ev.groups:
                    if gid in work:
                        f = work[gid]
                        f.target_step, f.admitted_pv, f.replaces, f.n = (
                            ev.target_step, ev.policy_version, ev.replaces, ev.rollouts)
            elif t is Finished:
                for i, gid in enumerate(ev.groups):
                    if gid in work:
                        f = work[gid]
                        f.finished = (ev.policy_version if ev.policy_version is not None else f.admitted_pv,
                                      ev.locators[i] if ev.locators is not None else None)
            elif t is RolloutSealed or t is RolloutFailed:
                for r in ev.rollouts:
                    if r.group_id in work:
                        _ended(work[r.group_id], ev, r)
            elif t is RolloutProgress:
                if ev.ref.group_id in work:
                    _prefix(work[ev.ref.group_id], ev)
    return takes[:upto], work, loader, size_then


def _adopt(rules: _Rules, known: set[int]) -> None:
    """Rule 4 on `rules`: the adoptable takes under the next fresh ids, where their work allows."""
    live_rows = {gid: (f.row.epoch, f.row.task_name, f.row.idx) for gid, f in rules.facts.items()}
    takes, work, loader, size = _adoptable(rules.tail, live_rows)
    if not takes:
        return
    out = rules.out
    new = {g.group_id: next(rules.fresh) for g in takes}
    events = [Taken([TakenGroup(new[g.group_id], g.idx, g.task_name, g.epoch, g.fingerprint) for g in takes],
                    None, size)]
    spares, readmit = [], []
    for g in takes:
        f, gid = work[g.group_id], new[g.group_id]
        out.adopted_from.append(g.group_id)
        out.rollouts[gid] = None
        if f.target_step is None:
            out.owners[gid] = Owner.SPARE if f.diverted else Owner.RESERVED
            if f.diverted:
                spares.append(gid)
            continue
        readmit += follow(rules, out, f, gid, new.get(f.replaces, f.replaces if f.replaces in known else None))
    out.first_commit += events + ([Diverted(spares)] if spares else []) + readmit
    out.loader, out.has_loader = loader, True


def expected_recovery(at: Model, commits: list, point: int, step: int, has, used: dict,
                      admitted_ever: set, new_ids: list[int], lag: int = 0) -> Expected:
    """What `restore(salvage=True, data_plane=..., max_policy_lag=lag)` at the committed
    checkpoint of `step`, whose `checkpoint_begun` is LSN `point`, hands back; `at` is the model
    at `point`, `commits` the active history (LSN 1 first), `used` the attempts any history
    dispatched, `admitted_ever` the groups any history admitted."""
    rules = _Rules(at, commits, point, step, has, used, new_ids, lag)
    rules.read_tail()
    for gid, owner in sorted(at.live().items()):
        rules.live_group(gid, owner)
    rules.reissue(admitted_ever)
    out = rules.out
    out.first_commit = rules.keep + rules.fence() + rules.demotions
    out.loader, out.has_loader = at.loader, at.has_loader
    _adopt(rules, set(rules.facts))
    for gid, rollouts in out.rollouts.items():
        if rollouts is not None:  # without the spans (r[5]), which the first commit carries
            out.rollouts[gid] = [(i, *r[:5]) for i, r in sorted(rollouts.items())]
    return out
