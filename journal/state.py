"""The ownership state a fold builds: `State` (the live groups' `Group` records, with their
`Rollouts` and each unsealed rollout's latest `Progress`, the terminal owners, the counts, the
checkpoints, the loader state, the dataset's and the run's identity) and `Undo`, what one
commit changed.

Memory: live groups keep their full record; a group that reached a terminal owner (TRAINED,
DROPPED) costs one byte in `TerminalOwners`, so folding a history of millions of events needs
memory for the live set, not the history. The rules that change a state are `rules.py`'s, one
step per event kind; the loop that runs them is `fold.py`.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import msgspec

from .events import Owner, PackedLoaderState
from . import loader_state as _loader_state


def latest_checkpoint(committed: Mapping[int, int]) -> tuple[int, int] | None:
    """(step, checkpoint_begun LSN) of the newest of `committed` checkpoints (step ->
    checkpoint_begun LSN), or None: the one "latest committed checkpoint"."""
    return max(committed.items(), key=lambda kv: kv[1]) if committed else None



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
                 "pending_checkpoints", "committed_checkpoints", "dataset_size", "row_sample", "identity",
                 "fold_steps")

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
        # The fold's steps made on this state (`fold.fold_records`): (live, counts, terminal,
        # event type -> step), valid while those three are the state's own (a revert replaces
        # counts). Not part of the ownership state: a copy starts without.
        self.fold_steps: tuple | None = None

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
