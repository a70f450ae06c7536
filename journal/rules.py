"""The ownership rules: one fold step per event kind, and the rules the calls share with them.

A kind's declaration (`kinds.py`) names its step by a factory here: `factory(kind, state)`
returns `step(state, event, lsn, record, undo, blobs)`, which folds one event of that kind into
`state` or raises (`OwnershipError`, `JournalCorrupt`), passing to `record`
(`undo.records.append`) the groups it changes and saving in `undo` the rest, so that the loop
(`fold.py`) can take the whole commit back. The owners a step tests and moves to are the kind's declared `from_owners` and `to`,
read once when the step is made: the table is the one place they are written. The loop makes
a state's steps once and keeps them while its `live`, `counts` and `terminal` are the ones they
hold, so a step holds what it reads on every event instead of fetching it.

The steps are the hot path of every replay (restore folds millions of them), so each is a plain
loop rather than a generator, and the owner test of a group (live, in one of the from-owners,
else `_illegal`) is written in each step's loop: a function for it costs a call per group. Records stay immutable (`State.copy` shares them): a move stores
a new record built in one call, the undo keeps the old one. A move takes each group from the
count of the owner it had, whichever of its from-owners that is, and adds the groups to the
count of its to-owner, so a row widened later stays counted.
"""

from __future__ import annotations

import enum
from typing import Iterable

from .errors import JournalCorrupt, OwnershipError, RolloutEnded, StaleAttempt
from .state import (SAMPLE_FIRST_ROWS, Group, LoaderState, Progress, Rollouts, SampledRow, State, Undo,
                    span_after, with_progress)


class Mark(enum.Enum):
    """What a checkpoint marker says of its step (`kinds.Kind.checkpoint`)."""

    BEGUN = "begun"
    COMMITTED = "committed"


def taken_next_id(groups, nxt: int, lsn: int | None) -> int:
    """The rule of the ids a `taken` allocates (`TakenGroup`s, in order): each exceeds every id
    allocated before it in the whole history, `nxt` being the lowest free one. Returns the
    lowest free id after them; OwnershipError naming the first id that breaks the rule."""
    for tg in groups:
        gid = tg.group_id
        if gid < nxt:
            where = f"LSN {lsn}: " if lsn is not None else ""
            raise OwnershipError(f"{where}taken allocates group {gid}, but ids below {nxt} are "
                                 "already used (a group is taken once in the whole history)",
                                 group_id=gid, lsn=lsn)
        nxt = gid + 1
    return nxt


def _check_distinct(name: str, gids, lsn: int) -> None:
    if len(gids) > 1 and len(set(gids)) != len(gids):
        dup = next(g for g in gids if gids.count(g) > 1)
        raise OwnershipError(f"LSN {lsn}: event {name} names group {dup} twice", group_id=dup, lsn=lsn)


def _illegal(state: State, kind, gid: int, lsn: int) -> OwnershipError:
    """The error for an event of `kind` naming `gid` while it is not in one of its from-owners."""
    g = state.live.get(gid)
    cur = g.owner.name if g is not None else (
        state.terminal.get(gid).name if state.terminal.get(gid) else "none (never taken)")
    want = "/".join(sorted(o.name for o in kind.from_owners))
    return OwnershipError(f"LSN {lsn}: {kind.name} of group {gid} requires owner {want}, "
                          f"but its owner is {cur}", group_id=gid, lsn=lsn)


# -- the moves of groups -----------------------------------------------------------------------

def take(kind, state: State):
    """`taken`: rows from the loader to `kind.to`, under ids above every id so far; the loader
    state and the dataset size it carries, and the row sample."""
    to, live, counts = kind.to, state.live, state.counts

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        first = state.next_group_id
        nxt = taken_next_id(event.groups, first, lsn)
        for tg in event.groups:
            gid = tg.group_id
            record(gid)
            live[gid] = Group(gid, tg.idx, tg.task_name, tg.epoch, tg.fingerprint, to)
        counts[to] += len(event.groups)
        state.next_group_id = nxt
        if event.loader_state is not None:
            _take_loader_state(state, event, blobs, lsn)
        if event.dataset_size is not None:
            state.dataset_size = event.dataset_size
        # the sample changes only while it fills, or when an id crosses a power of two
        if len(state.row_sample) < SAMPLE_FIRST_ROWS or (nxt - 1).bit_length() > (first - 1).bit_length():
            _sample_rows(state, event.groups)
    return step


def _sample_rows(state: State, groups) -> None:
    """Add the rows of a `taken` that the row sample keeps: a fingerprinted row not in it yet,
    while it holds fewer than SAMPLE_FIRST_ROWS rows or when its group id is a power of two.
    Deterministic, at most SAMPLE_FIRST_ROWS + 63 rows, spread over the whole history (the
    powers of two reach rows taken late in a long run)."""
    keys = None  # built at the first fingerprinted row (a run without fingerprints skips it)
    added = []
    for tg in groups:
        if tg.fingerprint is None:
            continue
        if keys is None:
            keys = {(r.idx, r.task_name) for r in state.row_sample}
        gid, key = tg.group_id, (tg.idx, tg.task_name)
        if key not in keys and (len(keys) < SAMPLE_FIRST_ROWS or (gid and not gid & (gid - 1))):
            keys.add(key)
            added.append(SampledRow(gid, tg.idx, tg.task_name, tg.fingerprint))
    if added:
        state.row_sample += tuple(added)


def _take_loader_state(state: State, event, blobs, lsn: int) -> None:
    packed, table = event.loader_state, blobs or {}
    missing = [d for d in packed.refs if d not in table]
    if missing:
        raise JournalCorrupt(
            f"LSN {lsn}: taken references loader-state blob {missing[0].hex()} that is not "
            "stored in its segment", lsn=lsn)
    state.loader = LoaderState(packed, {d: table[d] for d in packed.refs},
                               event.groups[-1].epoch if event.groups else None)


def move(kind, state: State):
    """A move that changes nothing but the owner (`diverted`): each group from one of
    `kind.from_owners` to `kind.to`."""
    allowed, to, name = kind.from_owners, kind.to, kind.name
    live, counts = state.live, state.counts
    live_get = live.get

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        gids = event.groups
        _check_distinct(name, gids, lsn)
        for gid in gids:
            g = live_get(gid)
            if g is None or g.owner not in allowed:
                raise _illegal(state, kind, gid, lsn)
            record(g)
            counts[g.owner] -= 1
            counts[to] += 1
            new = g.copy()
            new.owner = to
            live[gid] = new
    return step


def admit(kind, state: State):
    """`admitted`: each group to `kind.to` for its target step, with the weights that generate
    it, the group it replaces (which must have been taken) and its N tracked rollouts."""
    allowed, to, name = kind.from_owners, kind.to, kind.name
    live, counts = state.live, state.counts
    live_get = live.get

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        # "was it ever taken" is whether it has an owner: ids below next_group_id can be holes (a
        # GroupRef with an explicit group_id may skip ids), so a range check is not enough
        gids, replaces = event.groups, event.replaces
        if replaces is not None and state.owner_of(replaces) is None:
            raise OwnershipError(f"LSN {lsn}: admitted replaces group {replaces}, which was never taken",
                                 group_id=replaces, lsn=lsn)
        if len(gids) > 1:
            _check_distinct(name, gids, lsn)
        target_step, pv = event.target_step, event.policy_version
        rollouts = Rollouts.admitted(event.rollouts) if event.rollouts is not None else None
        for gid in gids:
            g = live_get(gid)
            if g is None or g.owner not in allowed:
                raise _illegal(state, kind, gid, lsn)
            record(g)
            counts[g.owner] -= 1
            live[gid] = Group(gid, g.idx, g.task_name, g.epoch, g.fingerprint, to, target_step, pv,
                              g.locator, replaces, rollouts)
        counts[to] += len(gids)
    return step


def finish(kind, state: State):
    """`finished`: each group to `kind.to`, its rows durable at its locator (one per group) or,
    for a group tracking rollouts, at its N sealed rollouts' (then it names none)."""
    allowed, to, name = kind.from_owners, kind.to, kind.name
    live, counts = state.live, state.counts
    live_get = live.get

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        gids, locators, pv = event.groups, event.locators, event.policy_version
        k = len(gids)
        if locators is not None and len(locators) != k:
            raise OwnershipError(f"LSN {lsn}: finished has {k} groups but {len(locators)} locators", lsn=lsn)
        if k > 1:
            _check_distinct(name, gids, lsn)
        i = 0  # (an index, not zip/enumerate: those cost more than the move itself)
        for gid in gids:
            g = live_get(gid)
            if g is None or g.owner not in allowed:
                raise _illegal(state, kind, gid, lsn)
            rollouts = g.rollouts
            if rollouts is not None:
                _check_finished_rollouts(gid, rollouts, locators, lsn)
            record(g)
            counts[g.owner] -= 1   # a failure reverts the counts with the rest
            live[gid] = Group(gid, g.idx, g.task_name, g.epoch, g.fingerprint, to, g.target_step,
                              g.policy_version if pv is None else pv,
                              locators[i] if locators is not None else None, g.replaces, rollouts)
            i += 1
        counts[to] += k
    return step


def _check_finished_rollouts(gid: int, rollouts: Rollouts, locators, lsn: int) -> None:
    """`finished` of a group admitted with rollouts=N: its rows are its N sealed rollouts."""
    if locators is not None:
        raise OwnershipError(f"LSN {lsn}: finished of group {gid} names locators, but the group was "
                             f"admitted with rollouts={rollouts.n}: its rows are its rollouts' locators, "
                             "so finished takes none for it", group_id=gid, lsn=lsn)
    if not rollouts.all_sealed():
        unsealed = rollouts.unsealed()
        shown = ", ".join(map(str, unsealed[:8])) + (", ..." if len(unsealed) > 8 else "")
        raise OwnershipError(f"LSN {lsn}: finished of group {gid} needs all {rollouts.n} rollouts "
                             f"sealed, but {len(unsealed)} are not (index {shown})",
                             group_id=gid, lsn=lsn)


def end(kind, state: State):
    """A move out of the live set (`trained`, `discarded`): each group from one of
    `kind.from_owners` to the terminal owner `kind.to`, a byte in `TerminalOwners`."""
    allowed, to, name = kind.from_owners, kind.to, kind.name
    live, counts, terminal = state.live, state.counts, state.terminal
    live_get = live.get

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        gids = event.groups
        if len(gids) > 1:
            _check_distinct(name, gids, lsn)
        codes = terminal.codes
        dense = len(codes)
        for gid in gids:
            g = live_get(gid)
            if g is None or g.owner not in allowed:
                raise _illegal(state, kind, gid, lsn)
            record(g)
            counts[g.owner] -= 1
            del live[gid]
            if 0 <= gid < dense:            # TerminalOwners.set's common case, inline
                codes[gid] = to
            else:
                terminal.set(gid, to)
                codes = terminal.codes
                dense = len(codes)
        counts[to] += len(gids)
    return step


# -- rollouts ----------------------------------------------------------------------------------

def dispatched_by_result(ref) -> int:
    """The attempt a seal or a prefix of rollout `ref` shows dispatched: the one it names."""
    return ref.attempt


def dispatched_by_failure(ref) -> int:
    """The attempt a failure of rollout `ref` shows dispatched: the failure of attempt a is
    followed by the dispatch of a + 1 (`fail` folds it so)."""
    return ref.attempt + 1


def seal(kind, state: State):
    """`rollout_sealed`: each named rollout's result durable at its locator (see `_results`)."""
    return _results(kind, state, sealing=True)


def fail(kind, state: State):
    """`rollout_failed`: each named rollout given up, its attempt raised by one (see `_results`)."""
    return _results(kind, state, sealing=False)


def _results(kind, state: State, *, sealing: bool):
    """The step of a seal or a failure: each named rollout must be of a group in one of
    `kind.from_owners` that tracks rollouts, in range, dispatched in exactly its current
    attempt, and not sealed. A seal of an older attempt is the late result of work that was
    given up: `StaleAttempt`, also when the retry has sealed already. Either ends the rollout's
    progress. A seal keeps the newest and the oldest version of its tokens and of the prefix it
    completes.

    One test per rollout on the replay path; `_refused` re-runs the rules in order, only for a
    rollout that breaks one, to say which."""
    allowed, live = kind.from_owners, state.live
    live_get = live.get

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        pv = event.policy_version if sealing else None
        refs = event.rollouts
        seen = set() if len(refs) > 1 else None  # (group, index) pairs named so far
        for ref in refs:
            gid, index = ref.group_id, ref.index
            g = live_get(gid)
            if g is None or g.owner not in allowed:
                raise _illegal(state, kind, gid, lsn)
            r = g.rollouts
            if (r is None or index >= len(r.attempts) or r.sealed >> index & 1
                    or r.attempts[index] != ref.attempt or (seen is not None and (gid, index) in seen)):
                raise _refused(kind, ref, r, seen, lsn, prefix=False)
            if seen is not None:
                seen.add((gid, index))
            progress = None if r.progress is None else with_progress(r.progress, r.n, index, None)
            if sealing:
                locators, versions = list(r.locators), list(r.versions)
                # the seal completes the prefix it continued: it spans that one's versions too
                newest, oldest = span_after(pv, event.since_version, r.progress_of(index))
                locators[index], versions[index] = ref.locator, newest
                since = r.since
                if oldest is not None or since is not None:
                    since = with_progress(since, r.n, index, oldest)
                new = Rollouts(r.attempts, r.sealed | 1 << index, tuple(locators), tuple(versions), progress,
                               since)
            else:
                attempts = list(r.attempts)
                attempts[index] += 1
                new = Rollouts(tuple(attempts), r.sealed, r.locators, r.versions, progress, r.since)
            record(g)
            changed = g.__copy__()
            changed.rollouts = new
            live[gid] = changed
    return step


def extend(kind, state: State):
    """`rollout_progress`: the fence of a seal (the group in one of `kind.from_owners` and
    tracking rollouts, the rollout in range, unsealed, named with its current attempt); its
    `Progress` replaces the rollout's previous one, spanning that one's versions too."""
    allowed, live = kind.from_owners, state.live
    live_get = live.get

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        ref = event.ref
        gid, index = ref.group_id, ref.index
        g = live_get(gid)
        if g is None or g.owner not in allowed:
            raise _illegal(state, kind, gid, lsn)
        r = g.rollouts
        if r is None or index >= len(r.attempts) or r.sealed >> index & 1 or r.attempts[index] != ref.attempt:
            raise _refused(kind, ref, r, None, lsn, prefix=True)
        p = Progress(ref.locator, event.tokens, event.turn,
                     *span_after(event.policy_version, event.since_version, r.progress_of(index)))
        record(g)
        changed = g.__copy__()
        changed.rollouts = Rollouts(r.attempts, r.sealed, r.locators, r.versions,
                                    with_progress(r.progress, len(r.attempts), index, p), r.since)
        live[gid] = changed
    return step


def _refused(kind, ref, r: Rollouts | None, seen: set | None, lsn: int, *, prefix: bool) -> OwnershipError:
    """The error for a rollout of a group in an allowed owner that a seal, a failure or (with
    `prefix`) a progress refuses: the first rule it breaks, in the rules' order."""
    gid, index, attempt = ref.group_id, ref.index, ref.attempt
    where = f"LSN {lsn}: {kind.name} of group {gid} rollout {index}"
    if r is None:
        return OwnershipError(f"{where}: the group was admitted without rollouts=, so its "
                              "rollouts are not tracked", group_id=gid, lsn=lsn)
    if index >= r.n:
        return OwnershipError(f"{where}: index out of range, the group has {r.n} rollouts "
                              f"(0..{r.n - 1})", group_id=gid, lsn=lsn)
    if seen is not None and (gid, index) in seen:
        return OwnershipError(f"{where}: the event names this rollout twice", group_id=gid, lsn=lsn)
    current = r.attempts[index]
    if attempt != current:  # before "sealed": the usual late result comes after its retry sealed
        return StaleAttempt(
            f"{where} names attempt {attempt}, but its current attempt is {current}: "
            + ("a late result of an attempt that was given up (fenced; drop its row)"
               if attempt < current else "that attempt was never dispatched"),
            group_id=gid, lsn=lsn, index=index, attempt=attempt, current=current)
    if prefix:
        return RolloutEnded(f"{where} attempt {attempt}: the rollout is sealed, its progress ended "
                            "with the seal (drop this partial row)",
                            group_id=gid, lsn=lsn, index=index, attempt=attempt)
    return OwnershipError(f"{where}: already sealed (attempt {current}); a rollout is sealed once",
                          group_id=gid, lsn=lsn)


# -- markers -----------------------------------------------------------------------------------

def checkpoint(kind, state: State):
    """A checkpoint marker: `kind.checkpoint` says what it marks (`mark_checkpoint`)."""
    mark = kind.checkpoint

    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        undo.save_checkpoints(state)
        mark_checkpoint(state.pending_checkpoints, state.committed_checkpoints, mark, event.step, lsn)
    return step


def identify(kind, state: State):
    """`identity_recorded`: the run identity from this commit on replaces the one before (the
    undo's scalars hold the one it replaces)."""
    def step(state: State, event, lsn: int, record, undo: Undo, blobs) -> None:
        state.identity = dict(event.digests)
    return step


def mark_checkpoint(pending: dict[int, int], committed: dict[int, int], mark: Mark, step: int, lsn: int) -> None:
    """The checkpoint-marker rule, on step -> checkpoint_begun LSN maps: `checkpoint_begun(S)` at
    LSN `lsn` makes S pending (refused once S is committed on this history);
    `checkpoint_committed(S)` commits the pending S (refused without one)."""
    if mark is Mark.BEGUN:
        if step in committed:
            raise OwnershipError(f"LSN {lsn}: checkpoint_begun(step={step}) but step "
                                 f"{step} is already committed on this history", lsn=lsn)
        pending[step] = lsn
        return
    begun = pending.pop(step, None)
    if begun is None:
        raise OwnershipError(f"LSN {lsn}: checkpoint_committed(step={step}) without a "
                             "pending checkpoint_begun for that step", lsn=lsn)
    committed[step] = begun


def begin_refused(state: State, step: int, *, begun_after: int,
                  queued: Iterable[tuple[Mark, int]] = ()) -> str | None:
    """Why a writer refuses `checkpoint_begun(step)` after the checkpoint marks `queued` ((mark,
    step) of the events recorded before it in the same commit) (None: it does not): a
    checkpoint it began (after LSN `begun_after`, where it opened) is not committed yet, or
    `step` is not above every committed step.

    Append time only, unlike `mark_checkpoint`: restore picks checkpoints by LSN and does not
    depend on these rules, a checkpoint that a crash abandoned while it was being saved is
    pending for good on its history (the next run begins others), and histories written
    before the rules must fold as they always did."""
    in_flight = {s: lsn for s, lsn in state.pending_checkpoints.items() if lsn > begun_after}
    top = max(state.committed_checkpoints, default=None)
    for mark, s in queued:
        if mark is Mark.BEGUN:
            in_flight[s] = state.lsn + 1
        else:
            in_flight.pop(s, None)
            top = s if top is None else max(top, s)
    if in_flight:
        s, lsn = next(iter(in_flight.items()))
        return (f"begin_checkpoint(step={step}): the step-{s} checkpoint begun at LSN {lsn} is not "
                f"committed yet; commit it (commit_checkpoint(step={s})) once its files are durable, "
                "then begin the next (a checkpoint whose save failed is saved again and committed, "
                "or abandoned by a restart)")
    if top is not None and step <= top:
        where = "below" if step < top else "at"
        return (f"begin_checkpoint(step={step}) is {where} step {top}, which is committed on this "
                "history: a checkpoint's step is above every committed one")
    return None
