"""The fold: the one function that turns commits into ownership state.

The writer runs it before a commit is written (an illegal transition raises and
nothing is written), and every reader (open, compaction, restore, inspection)
runs the same code over what is on disk, so the ownership rules are enforced
twice by construction. `apply` is atomic: either the whole commit is folded or
the state is left exactly as it was and `OwnershipError` is raised.

Memory: live groups keep their full record; a group that reached a terminal
owner (TRAINED, DROPPED) costs one byte in `TerminalOwners`, so folding a
history of millions of events needs memory for the live set, not the history.
"""

from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple

import msgspec

from .errors import JournalCorrupt, OwnershipError, RolloutEnded, StaleAttempt
from .events import (EVENT_TYPES, LIVE_OWNERS, Admitted, CheckpointBegun, CheckpointCommitted, Commit,
                     Discarded, Diverted, Finished, IdentityRecorded, Owner, PackedLoaderState, Restored,
                     RolloutProgress, RolloutSealed, RolloutFailed, Taken, Trained, event_name)
from . import loader_state as _loader_state


def latest_checkpoint(committed: Mapping[int, int]) -> tuple[int, int] | None:
    """(step, checkpoint_begun LSN) of the newest of `committed` checkpoints (step ->
    checkpoint_begun LSN), or None: the one "latest committed checkpoint"."""
    return max(committed.items(), key=lambda kv: kv[1]) if committed else None


class Transition(NamedTuple):
    """One row of the ownership table: an event moves each group it names from one of
    `from_owners` to `to`. `from_owners` is empty for `taken` (the group comes from the
    loader, which the journal does not track); `to` is None for events that name no group."""

    event: str
    from_owners: frozenset
    to: Owner | None


# The ownership table, read from each event kind's declaration (`events.py`). `fold_records`
# folds the kinds every group goes through inline, reading their owners from the same
# declarations (`_TAKEN_TO`, `_DIVERTED_FROM`, ... above `_sample_rows`);
# tests/journal/test_fold_table.py holds every kind of the fold against this table, and the
# README's table is `transition_table_markdown()`.
TRANSITIONS: dict[str, Transition] = {
    event_name: Transition(event_name, kind.from_owners, kind.to)
    for event_name, kind in ((kind.__struct_config__.tag, kind) for kind in EVENT_TYPES)}


def transition_table_markdown() -> str:
    """The ownership table as the README shows it (event | from | to)."""
    def owners(t: Transition) -> str:
        if t.to is None:
            return "-"
        if not t.from_owners:
            return "loader"
        if t.from_owners == LIVE_OWNERS:
            return "any live owner"
        return ", ".join(o.name for o in sorted(t.from_owners))
    rows = ["| event | from | to |", "| --- | --- | --- |"]
    rows += [f"| `{t.event}` | {owners(t)} | {t.to.name if t.to is not None else '-'} |"
             for t in TRANSITIONS.values()]
    return "\n".join(rows)


_DENSE_GAP = 1 << 20  # group ids further than this past the dense table go to a dict
SAMPLE_FIRST_ROWS = 32  # the row sample keeps the first this many distinct fingerprinted rows


class SampledRow(NamedTuple):
    """A fingerprinted row the history took, kept so restore can check the dataset's identity."""

    group_id: int
    idx: int
    task_name: str | None
    fingerprint: bytes


class Progress(msgspec.Struct, gc=False, frozen=True):
    """The latest durable prefix of an unsealed rollout's current attempt (`rollout_progress`):
    where its row is, the tokens (and turns) it holds, the newest version of the weights that
    generated them (`policy_version`) and, when other weights made some of them (a prefix
    continued after a restore, or across a weight update), the oldest (`since`; None: all by
    `policy_version`)."""

    locator: str
    tokens: int
    turn: int | None = None
    policy_version: int | None = None
    since: int | None = None


def span_after(version: int | None, since_version: int | None,
               before: "Progress | None") -> tuple[int | None, int | None]:
    """(policy_version, since) of work recorded with `version` and `since_version` that extends
    the prefix `before` (None: none): the newest and the oldest version its tokens have, the
    oldest only when it differs (None: unknown, or one version). A prefix continued by older
    weights (after a restore) keeps the newer version it holds: the bound is on the newest."""
    known = [v for v in (version, since_version, *(span_of(before) if before is not None else ()))
             if v is not None]
    if not known:
        return None, None
    newest, oldest = max(known), min(known)
    return newest, (oldest if oldest < newest else None)


def span_of(p: "Progress") -> tuple[int | None, int | None]:
    """The oldest and newest version of a prefix's tokens."""
    return (p.since if p.since is not None else p.policy_version), p.policy_version


class Rollouts(msgspec.Struct, gc=False, frozen=True):
    """The N rollouts of a group admitted with `rollouts=N`, by index: the current attempt,
    whether it is sealed (bit i of `sealed`), a sealed one's data-plane locator and the
    policy version that generated it (the newest of its tokens: `since` holds the oldest when
    older weights began it), and an unsealed one's latest `Progress`.

    `progress` is None while no rollout of the group has any (the common case costs nothing),
    else one `Progress` or None per index; only an unsealed rollout's current attempt has one.
    `since` likewise: None while no sealed rollout spans versions.

    Immutable like `Group`: a seal or a failure builds a new one (one object and the tuples
    that change, whatever N), and the undo keeps the old."""

    attempts: tuple
    sealed: int
    locators: tuple
    versions: tuple
    progress: tuple | None = None
    since: tuple | None = None

    @classmethod
    def admitted(cls, n: int) -> "Rollouts":
        return cls((0,) * n, 0, (None,) * n, (None,) * n)

    @property
    def n(self) -> int:
        return len(self.attempts)

    def is_sealed(self, index: int) -> bool:
        return bool(self.sealed >> index & 1)

    def all_sealed(self) -> bool:
        return self.sealed == (1 << len(self.attempts)) - 1

    def unsealed(self) -> list[int]:
        return [i for i in range(len(self.attempts)) if not self.sealed >> i & 1]

    def progress_of(self, index: int) -> Progress | None:
        return self.progress[index] if self.progress is not None else None

    def since_of(self, index: int) -> int | None:
        return self.since[index] if self.since is not None else None


def with_progress(progress: tuple | None, n: int, index: int, value) -> tuple | None:
    """A sparse per-rollout tuple (`Rollouts.progress`, `Rollouts.since`) with rollout `index`
    (of `n`) set to `value`: None once no rollout has any."""
    if progress is None:
        if value is None:
            return None
        progress = (None,) * n
    changed = progress[:index] + (value,) + progress[index + 1:]
    return changed if value is not None or any(p is not None for p in changed) else None


class Group(msgspec.Struct, gc=False):
    """The record of a live group: its locator and what the last transitions said.

    A msgspec Struct: built in C (the fold builds one per transition of a group) and
    untracked by the cyclic GC (it only holds ints, strings, bytes and an `Owner`, so it
    cannot be part of a cycle). Records are
    treated as immutable once applied (`State.copy` shares them); `copy()` to change one."""

    group_id: int
    idx: int
    task_name: str | None
    epoch: int | None
    fingerprint: bytes | None
    owner: Owner
    target_step: int | None = None
    policy_version: int | None = None
    locator: str | None = None
    replaces: int | None = None
    rollouts: Rollouts | None = None  # groups admitted with rollouts=N

    def copy(self) -> "Group":
        return self.__copy__()

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in GROUP_FIELDS}

    def __repr__(self) -> str:
        return f"Group({self.group_id}, idx={self.idx}, owner={self.owner.name})"


GROUP_FIELDS = Group.__struct_fields__  # in declaration order


class TerminalOwners:
    """Owner codes of groups that left the live set: a byte per group id, a dict for outliers."""

    __slots__ = ("codes", "sparse")

    def __init__(self) -> None:
        self.codes = bytearray()
        self.sparse: dict[int, int] = {}

    def get(self, gid: int) -> Owner | None:
        # 0 <= gid: a negative id must not index the bytearray from its end (owner_of(-1)
        # would report the last dense group's owner, or raise IndexError on an empty table)
        if 0 <= gid < len(self.codes):
            code = self.codes[gid]
            return Owner(code) if code else None
        code = self.sparse.get(gid)
        return Owner(code) if code else None

    def set(self, gid: int, owner: int) -> None:
        n = len(self.codes)
        if gid < n:
            self.codes[gid] = owner
        elif gid < n + _DENSE_GAP:
            self.codes.extend(bytes(gid - n + 1 + (n >> 1)))
            self.codes[gid] = owner
        else:
            self.sparse[gid] = owner

    def clear(self, gid: int) -> None:
        if gid < len(self.codes):
            self.codes[gid] = 0
        else:
            self.sparse.pop(gid, None)

    def copy(self) -> "TerminalOwners":
        t = TerminalOwners()
        t.codes = bytearray(self.codes)
        t.sparse = dict(self.sparse)
        return t


class LoaderState:
    """The latest loader state: packed bytes plus the blobs they reference; decoded on demand.
    `epoch` is the loader pass of the last group its `taken` took (None when that group has
    none): a trainer restoring the state goes on in that pass."""

    __slots__ = ("packed", "blobs", "epoch")

    def __init__(self, packed: PackedLoaderState, blobs: Mapping[bytes, bytes], epoch: int | None = None):
        self.packed = packed
        self.blobs = dict(blobs)
        self.epoch = epoch

    def decode(self):
        return _loader_state.unpack(self.packed, self.blobs)

    @classmethod
    def from_object(cls, obj, epoch: int | None = None) -> "LoaderState":
        """Pack a loader `state_dict()` (e.g. one read back from a cut)."""
        packed, blobs = _loader_state.pack(obj)
        return cls(packed, blobs, epoch)


class State:
    """Ownership state after folding commits 1..lsn of one history."""

    __slots__ = ("lsn", "chain", "timeline", "live", "terminal", "counts", "next_group_id", "loader",
                 "pending_checkpoints", "committed_checkpoints", "dataset_size", "row_sample", "identity")

    def __init__(self) -> None:
        self.lsn = 0
        self.chain = 0
        self.timeline = 0  # the timeline that wrote commit `lsn` (with `chain`: the anchor)
        self.live: dict[int, Group] = {}
        self.terminal = TerminalOwners()
        self.counts = [0] * 7  # indexed by Owner
        self.next_group_id = 0
        self.loader: LoaderState | None = None
        self.pending_checkpoints: dict[int, int] = {}    # step -> checkpoint_begun LSN
        self.committed_checkpoints: dict[int, int] = {}  # step -> checkpoint_begun LSN
        # The dataset's identity as the history recorded it: the latest `taken(dataset_size=)`,
        # and the sample of taken rows (`_sample_rows`), a tuple replaced, never changed, so
        # an undo restores it by reference.
        self.dataset_size: int | None = None
        self.row_sample: tuple[SampledRow, ...] = ()
        # The run identity the history recorded last (`identity_recorded`: key -> fingerprint of
        # its value), None when it recorded none; a dict replaced, never changed, like the sample.
        self.identity: dict[str, bytes] | None = None

    def owner_of(self, gid: int) -> Owner | None:
        g = self.live.get(gid)
        return g.owner if g is not None else self.terminal.get(gid)

    def owner_counts(self) -> dict[Owner, int]:
        return {o: self.counts[o] for o in Owner}

    def groups(self, owner: Owner | None = None) -> list[Group]:
        """Live groups (all, or of one owner), ordered by group id."""
        gs = [g for g in self.live.values() if owner is None or g.owner == owner]
        gs.sort(key=lambda g: g.group_id)
        return gs

    def latest_committed_checkpoint(self) -> tuple[int, int] | None:
        """(step, checkpoint_begun LSN) of the newest committed checkpoint, or None."""
        return latest_checkpoint(self.committed_checkpoints)

    def copy(self) -> "State":
        """An independent state. Live `Group` records are shared, not copied: the fold never
        changes a record once its commit is applied (a transition stores a new record), so
        sharing is safe as long as callers treat records as read-only (copy one to change it).
        This keeps `Journal.state_copy`, which blocks appends, at a dict copy."""
        s = State()
        s.lsn, s.chain, s.timeline = self.lsn, self.chain, self.timeline
        s.next_group_id, s.loader = self.next_group_id, self.loader
        s.dataset_size, s.row_sample, s.identity = self.dataset_size, self.row_sample, self.identity
        s.live = dict(self.live)
        s.terminal = self.terminal.copy()
        s.counts = list(self.counts)
        s.pending_checkpoints = dict(self.pending_checkpoints)
        s.committed_checkpoints = dict(self.committed_checkpoints)
        return s

    def same_as(self, other: "State") -> bool:
        """Equal ownership (live records, terminal owners, counts, ids, checkpoints, LSN)."""
        return (self.lsn == other.lsn and self.live == other.live and self.counts == other.counts
                and self.next_group_id == other.next_group_id
                and self.pending_checkpoints == other.pending_checkpoints
                and self.committed_checkpoints == other.committed_checkpoints
                and self.dataset_size == other.dataset_size and self.row_sample == other.row_sample
                and self.identity == other.identity
                and self.terminal.codes.rstrip(b"\0") == other.terminal.codes.rstrip(b"\0")
                and self.terminal.sparse == other.terminal.sparse)


class Undo:
    """What one `apply` changed, so a commit that was not made durable can be taken back."""

    __slots__ = ("records", "scalars", "checkpoints")

    def __init__(self, state: State):
        # per group the commit changed, in order: its old live record, or its id when the
        # commit took it (so reverting pops it)
        self.records: list[Group | int] = []
        self.scalars = (state.lsn, state.chain, state.timeline, state.next_group_id, state.loader,
                        list(state.counts), state.dataset_size, state.row_sample, state.identity)
        # Copies of the checkpoint maps, taken by the commit's first checkpoint event only: the
        # maps grow with the run, and a commit without a checkpoint event copies nothing, so
        # its cost does not grow with the number of checkpoints.
        self.checkpoints: tuple[dict[int, int], dict[int, int]] | None = None

    def save_checkpoints(self, state: State) -> None:
        if self.checkpoints is None:
            self.checkpoints = (dict(state.pending_checkpoints), dict(state.committed_checkpoints))

    def revert(self, state: State) -> None:
        for old in reversed(self.records):
            if type(old) is int:
                state.live.pop(old, None)
                state.terminal.clear(old)
            else:
                state.live[old.group_id] = old
                state.terminal.clear(old.group_id)
        (state.lsn, state.chain, state.timeline, state.next_group_id, state.loader,
         state.counts, state.dataset_size, state.row_sample, state.identity) = self.scalars
        if self.checkpoints is not None:
            state.pending_checkpoints, state.committed_checkpoints = self.checkpoints


def apply(state: State, commit: Commit, *, chain: int = 0, timeline: int = 0,
          blobs: Mapping[bytes, bytes] | None = None) -> Undo:
    """Fold `commit` into `state` atomically; returns the undo record.

    `chain` is the chain checksum after this commit (see `format.py`) and
    `timeline` the branch that wrote it (together: the state's anchor); `blobs`
    resolves the loader-state blobs a `taken` references. Raises
    `OwnershipError` (state unchanged) on an illegal transition and
    `JournalCorrupt` when the LSN does not follow or a blob is missing.
    """
    undo = Undo.__new__(Undo)
    undo.records = []
    fold_records(state, ((commit, chain, timeline, None, None, blobs),), undo)
    return undo


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


def fold_records(state: State, records, undo: Undo | None = None, log=None) -> State:
    """Fold `(commit, chain, timeline, segment, offset, blobs)` tuples (the `Record`s a reader
    yields) into `state`, each commit atomically as `apply` does (an error leaves the state
    after the last whole commit). One undo record is refilled by every commit (its list is
    cleared first); this is the loop every replay runs, once per commit, and the only fold
    loop: `apply`, `fold`, `Reader.fold`, `state_at`, verify and the inspection fold all
    hand their commits to it (a caller that acts between two commits hands it one `(rec,)`).

    With `log` (a list or deque), every commit gets its own undo record instead, appended as
    `(lsn, undo, commit)` once the commit is folded: a caller that may have to go back to an
    earlier LSN keeps the ones it needs and reverts them, newest first (and has the commits it
    took back without reading them again)."""
    undo = Undo(state) if undo is None else undo
    live, counts, undo_records = state.live, state.counts, undo.records
    live_get, record = live.get, undo_records.append
    log_append = log.append if log is not None else None
    for commit, chain, timeline, _segment, _offset, blobs in records:
        if log is not None:
            undo = Undo.__new__(Undo)
            undo_records = undo.records = []
            record = undo_records.append
        lsn = commit.lsn
        if lsn != state.lsn + 1:
            raise JournalCorrupt(f"commit LSN {lsn} does not follow LSN {state.lsn}", lsn=lsn)
        undo.scalars = (state.lsn, state.chain, state.timeline, state.next_group_id, state.loader,
                        counts[:], state.dataset_size, state.row_sample, state.identity)
        undo.checkpoints = None
        undo_records.clear()
        # the four kinds every group goes through are folded inline (this loop runs once per
        # event of every replay); the others go through _apply_event
        try:
            for event in commit.events:
                kind = type(event)
                if kind is Finished:
                    gids, locators, pv = event.groups, event.locators, event.policy_version
                    k = len(gids)
                    if locators is not None and len(locators) != k:
                        raise OwnershipError(f"LSN {lsn}: finished has {k} groups but "
                                             f"{len(locators)} locators", lsn=lsn)
                    if k > 1:
                        _check_distinct(event, gids, lsn)
                    i = 0  # (an index, not zip/enumerate: those cost more than the move itself)
                    for gid in gids:
                        g = live_get(gid)
                        if g is None or g.owner not in _FINISHED_FROM:
                            raise _illegal(state, event, gid, lsn)
                        rollouts = g.rollouts
                        if rollouts is not None:
                            _check_finished_rollouts(gid, rollouts, locators, lsn)
                        record(g)
                        counts[g.owner] -= 1   # a failure reverts the counts with the rest
                        live[gid] = Group(gid, g.idx, g.task_name, g.epoch, g.fingerprint, _FINISHED_TO,
                                          g.target_step, g.policy_version if pv is None else pv,
                                          locators[i] if locators is not None else None, g.replaces,
                                          rollouts)
                        i += 1
                    counts[_FINISHED_TO] += k
                elif kind is Admitted:
                    # "was it ever taken" is whether it has an owner: ids below next_group_id can be
                    # holes (a GroupRef with an explicit group_id may skip ids), so a range check
                    # is not enough
                    gids, replaces = event.groups, event.replaces
                    if replaces is not None and state.owner_of(replaces) is None:
                        raise OwnershipError(f"LSN {lsn}: admitted replaces group {replaces}, "
                                             "which was never taken", group_id=replaces, lsn=lsn)
                    if len(gids) > 1:
                        _check_distinct(event, gids, lsn)
                    target_step, pv = event.target_step, event.policy_version
                    rollouts = Rollouts.admitted(event.rollouts) if event.rollouts is not None else None
                    for gid in gids:
                        g = live_get(gid)
                        if g is None or g.owner not in _ADMITTED_FROM:
                            raise _illegal(state, event, gid, lsn)
                        record(g)
                        counts[g.owner] -= 1
                        live[gid] = Group(gid, g.idx, g.task_name, g.epoch, g.fingerprint, _ADMITTED_TO,
                                          target_step, pv, g.locator, replaces, rollouts)
                    counts[_ADMITTED_TO] += len(gids)
                elif kind is Trained:
                    gids = event.groups
                    if len(gids) > 1:
                        _check_distinct(event, gids, lsn)
                    terminal = state.terminal
                    codes = terminal.codes
                    dense = len(codes)
                    for gid in gids:
                        g = live_get(gid)
                        if g is None or g.owner not in _TRAINED_FROM:
                            raise _illegal(state, event, gid, lsn)
                        record(g)
                        counts[g.owner] -= 1
                        del live[gid]
                        if 0 <= gid < dense:            # TerminalOwners.set's common case, inline
                            codes[gid] = _TRAINED_TO
                        else:
                            terminal.set(gid, _TRAINED_TO)
                            codes = terminal.codes
                            dense = len(codes)
                    counts[_TRAINED_TO] += len(gids)
                elif kind is Taken:
                    first = state.next_group_id
                    nxt = taken_next_id(event.groups, first, lsn)
                    for tg in event.groups:
                        gid = tg.group_id
                        record(gid)
                        live[gid] = Group(gid, tg.idx, tg.task_name, tg.epoch, tg.fingerprint, _TAKEN_TO)
                    counts[_TAKEN_TO] += len(event.groups)
                    state.next_group_id = nxt
                    if event.loader_state is not None:
                        _take_loader_state(state, event, blobs, lsn)
                    if event.dataset_size is not None:
                        state.dataset_size = event.dataset_size
                    # the sample changes only while it fills, or when an id crosses a power of two
                    if (len(state.row_sample) < SAMPLE_FIRST_ROWS
                            or (nxt - 1).bit_length() > (first - 1).bit_length()):
                        _sample_rows(state, event.groups)
                else:
                    _apply_event(state, event, lsn, undo, blobs)
        except BaseException:
            undo.revert(state)
            raise
        state.lsn = lsn
        state.chain = chain
        state.timeline = timeline
        if log is not None:
            log_append((lsn, undo, commit))
    return state


def _check_distinct(event, gids, lsn: int) -> None:
    if len(gids) > 1 and len(set(gids)) != len(gids):
        dup = next(g for g in gids if gids.count(g) > 1)
        raise OwnershipError(f"LSN {lsn}: event {event_name(event)} names group {dup} twice",
                             group_id=dup, lsn=lsn)


def _illegal(state: State, event, gid: int, lsn: int) -> OwnershipError:
    """The error for `event` naming `gid` while it is not in one of the table's from-owners."""
    allowed = TRANSITIONS[event_name(event)].from_owners
    g = state.live.get(gid)
    cur = g.owner.name if g is not None else (
        state.terminal.get(gid).name if state.terminal.get(gid) else "none (never taken)")
    want = "/".join(sorted(o.name for o in allowed))
    return OwnershipError(f"LSN {lsn}: {event_name(event)} of group {gid} requires owner {want}, "
                          f"but its owner is {cur}", group_id=gid, lsn=lsn)


# The moves below are the hot path of every replay (restore folds millions of them), so each
# kind is a plain loop rather than a generator. Records stay immutable (`State.copy` shares
# them): a move stores a new record built in one call, the undo keeps the old one.

def _move_terminal(state: State, event, lsn: int, undo: Undo, allowed: frozenset, to: Owner) -> None:
    """Move every group of `event` from one of `allowed` out of the live set, to `to`."""
    gids = event.groups
    _check_distinct(event, gids, lsn)
    live, counts, record, terminal_set = state.live, state.counts, undo.records.append, state.terminal.set
    live_get = live.get
    for gid in gids:
        g = live_get(gid)
        if g is None or g.owner not in allowed:
            raise _illegal(state, event, gid, lsn)
        record(g)
        counts[g.owner] -= 1
        counts[to] += 1
        del live[gid]
        terminal_set(gid, to)


# Each move's row of the table, read once (the hot path tests membership in the from-owners).
# A move takes each group from the count of the owner it had, whichever of its from-owners
# that is, and adds the groups to the count of its to-owner: a row widened later stays counted.
_TAKEN_TO = Taken.to
_DIVERTED_FROM, _DIVERTED_TO = Diverted.from_owners, Diverted.to
_ADMITTED_FROM, _ADMITTED_TO = Admitted.from_owners, Admitted.to
_FINISHED_FROM, _FINISHED_TO = Finished.from_owners, Finished.to
_TRAINED_FROM, _TRAINED_TO = Trained.from_owners, Trained.to
_DISCARDED_FROM, _DISCARDED_TO = Discarded.from_owners, Discarded.to
_PROGRESS_FROM = RolloutProgress.from_owners


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


def _take_loader_state(state: State, event: Taken, blobs, lsn: int) -> None:
    packed, table = event.loader_state, blobs or {}
    missing = [d for d in packed.refs if d not in table]
    if missing:
        raise JournalCorrupt(
            f"LSN {lsn}: taken references loader-state blob {missing[0].hex()} that is not "
            "stored in its segment", lsn=lsn)
    state.loader = LoaderState(packed, {d: table[d] for d in packed.refs},
                               event.groups[-1].epoch if event.groups else None)


def _apply_event(state: State, event, lsn: int, undo: Undo, blobs) -> None:
    """The event kinds `apply` does not fold inline."""
    kind = type(event)
    if kind is Discarded:
        _move_terminal(state, event, lsn, undo, _DISCARDED_FROM, _DISCARDED_TO)
    elif kind is Diverted:
        gids = event.groups
        _check_distinct(event, gids, lsn)
        for gid in gids:
            g = state.live.get(gid)
            if g is None or g.owner not in _DIVERTED_FROM:
                raise _illegal(state, event, gid, lsn)
            undo.records.append(g)
            state.counts[g.owner] -= 1
            state.counts[_DIVERTED_TO] += 1
            new = g.copy()
            new.owner = _DIVERTED_TO
            state.live[gid] = new
    elif kind is RolloutSealed or kind is RolloutFailed:
        _apply_rollouts(state, event, lsn, undo)
    elif kind is RolloutProgress:
        _apply_progress(state, event, lsn, undo)
    elif kind is CheckpointBegun or kind is CheckpointCommitted:
        undo.save_checkpoints(state)
        mark_checkpoint(state.pending_checkpoints, state.committed_checkpoints, event, lsn)
    elif kind is IdentityRecorded:  # the undo's scalars hold the identity it replaces
        state.identity = dict(event.digests)
    elif kind is Restored:  # a record of the restore: no state changes
        pass
    else:  # pragma: no cover - the decoder only produces the union's types
        raise JournalCorrupt(f"LSN {lsn}: unknown event {event!r}", lsn=lsn)


def mark_checkpoint(pending: dict[int, int], committed: dict[int, int], event, lsn: int) -> None:
    """The checkpoint-marker rule, on step -> checkpoint_begun LSN maps: `checkpoint_begun(S)` at
    LSN `lsn` makes S pending (refused once S is committed on this history);
    `checkpoint_committed(S)` commits the pending S (refused without one)."""
    if type(event) is CheckpointBegun:
        if event.step in committed:
            raise OwnershipError(f"LSN {lsn}: checkpoint_begun(step={event.step}) but step "
                                 f"{event.step} is already committed on this history", lsn=lsn)
        pending[event.step] = lsn
        return
    begun = pending.pop(event.step, None)
    if begun is None:
        raise OwnershipError(f"LSN {lsn}: checkpoint_committed(step={event.step}) without a "
                             "pending checkpoint_begun for that step", lsn=lsn)
    committed[event.step] = begun


def begin_refused(state: State, step: int, *, begun_after: int, queued: Iterable = ()) -> str | None:
    """Why a writer refuses `checkpoint_begun(step)` after the `queued` events of the same
    commit (None: it does not): a checkpoint it began (after LSN `begun_after`, where it
    opened) is not committed yet, or `step` is not above every committed step.

    Append time only, unlike `mark_checkpoint`: restore picks checkpoints by LSN and does not
    depend on these rules, a checkpoint that a crash abandoned while it was being saved is
    pending for good on its history (the next run begins others), and histories written
    before the rules must fold as they always did."""
    in_flight = {s: lsn for s, lsn in state.pending_checkpoints.items() if lsn > begun_after}
    top = max(state.committed_checkpoints, default=None)
    for ev in queued:
        if type(ev) is CheckpointBegun:
            in_flight[ev.step] = state.lsn + 1
        elif type(ev) is CheckpointCommitted:
            in_flight.pop(ev.step, None)
            top = ev.step if top is None else max(top, ev.step)
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


def _apply_rollouts(state: State, event, lsn: int, undo: Undo) -> None:
    """`rollout_sealed` / `rollout_failed`: each named rollout must be of an ADMITTED group that
    tracks rollouts, in range, dispatched in exactly its current attempt, and not sealed. A
    seal of an older attempt is the late result of work that was given up: `StaleAttempt`,
    also when the retry has sealed already. Either ends the rollout's progress.

    One test per rollout on the replay path; `_refused` re-runs the rules in order, only for a
    rollout that breaks one, to say which."""
    sealing = type(event) is RolloutSealed
    pv = event.policy_version if sealing else None
    refs, allowed = event.rollouts, type(event).from_owners
    seen = set() if len(refs) > 1 else None  # (group, index) pairs named so far
    live = state.live
    for ref in refs:
        gid, index = ref.group_id, ref.index
        g = live.get(gid)
        if g is None or g.owner not in allowed:
            raise _illegal(state, event, gid, lsn)
        r = g.rollouts
        if (r is None or index >= len(r.attempts) or r.sealed >> index & 1
                or r.attempts[index] != ref.attempt or (seen is not None and (gid, index) in seen)):
            raise _refused(event, ref, r, seen, lsn)
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
            new = Rollouts(r.attempts, r.sealed | 1 << index, tuple(locators), tuple(versions), progress, since)
        else:
            attempts = list(r.attempts)
            attempts[index] += 1
            new = Rollouts(tuple(attempts), r.sealed, r.locators, r.versions, progress, r.since)
        undo.records.append(g)
        changed = g.__copy__()
        changed.rollouts = new
        live[gid] = changed


def dispatched_attempt(event, ref) -> int:
    """The highest attempt of `ref`'s rollout that rollout event `event` shows dispatched: a seal
    or a progress names its attempt; the failure of attempt a is followed by the dispatch of a + 1 (the rule
    `_apply_rollouts` folds). A resume fences every unsealed rollout above it."""
    return ref.attempt + (type(event) is RolloutFailed)


def _apply_progress(state: State, event: RolloutProgress, lsn: int, undo: Undo) -> None:
    """`rollout_progress`: the fence of a seal (the group ADMITTED and tracking rollouts, the
    rollout in range, unsealed, named with its current attempt); its `Progress` replaces the
    rollout's previous one."""
    ref = event.rollout
    gid, index = ref.group_id, ref.index
    g = state.live.get(gid)
    if g is None or g.owner not in _PROGRESS_FROM:
        raise _illegal(state, event, gid, lsn)
    r = g.rollouts
    if r is None or index >= len(r.attempts) or r.sealed >> index & 1 or r.attempts[index] != ref.attempt:
        raise _refused(event, ref, r, None, lsn)
    # a newer prefix of the attempt extends the one before: it spans that one's versions too
    p = Progress(ref.locator, event.tokens, event.turn,
                 *span_after(event.policy_version, event.since_version, r.progress_of(index)))
    undo.records.append(g)
    changed = g.__copy__()
    changed.rollouts = Rollouts(r.attempts, r.sealed, r.locators, r.versions,
                                with_progress(r.progress, len(r.attempts), index, p), r.since)
    state.live[gid] = changed


def _refused(event, ref, r: Rollouts | None, seen: set | None, lsn: int) -> OwnershipError:
    """The error for a rollout of an ADMITTED group that `_apply_rollouts` or `_apply_progress`
    refuses: the first rule it breaks, in the rules' order."""
    gid, index, attempt = ref.group_id, ref.index, ref.attempt
    where = f"LSN {lsn}: {event_name(event)} of group {gid} rollout {index}"
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
    if type(event) is RolloutProgress:
        return RolloutEnded(f"{where} attempt {attempt}: the rollout is sealed, its progress ended "
                            "with the seal (drop this partial row)",
                            group_id=gid, lsn=lsn, index=index, attempt=attempt)
    return OwnershipError(f"{where}: already sealed (attempt {current}); a rollout is sealed once",
                          group_id=gid, lsn=lsn)


def fold(commits: Iterable[Commit], state: State | None = None) -> State:
    """Fold commits (each `lsn` following the last) into a new or given state.

    For commits outside a journal (tests, models): chain and timeline 0, each commit's blobs
    its own; readers fold their `Record`s with `fold_records`."""
    state = State() if state is None else state
    return fold_records(state, ((c, 0, 0, None, None, {b.digest: b.data for b in c.blobs})
                                for c in commits))

