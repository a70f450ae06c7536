"""The one schema of the journal: owners, locators and the event records (msgspec tagged structs).

Events are encoded as msgpack arrays whose first element is the tag, so a
frame costs a few bytes per group. Adding a field at the end with a default is
a compatible change; anything else bumps `FORMAT_VERSION` in `format.py`.

An event kind's record is its struct here: the tag is its name, the fields with their bounds
(`msgspec.Meta`) are its call's arguments. Everything else about it (its call, its from- and
to-owners, its fold step, what it names, how inspection shows it) is its row in the table of
kinds (`kinds.py`); adding a kind is its struct here, in `EVENT_TYPES`, and its row there.
"""

from __future__ import annotations

import enum
from typing import Annotated, Union

import msgspec


class Owner(enum.IntEnum):
    """Where a group lives. Rows never taken are the dataloader's and have no owner here."""

    RESERVED = 1
    ADMITTED = 2
    REPLAY = 3
    SPARE = 4
    TRAINED = 5
    DROPPED = 6

    @property
    def live(self) -> bool:
        return self in LIVE_OWNERS


LIVE_OWNERS = frozenset({Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE})


# Every integer a commit stores fits a cut's int64 columns, whose -2**63 means "none"
# (snapshot/tables.py); allocated ids and row numbers are never negative. Checked where commits
# are encoded (the writer's decode gate) and when they are read. Group ids named by a
# transition need no bound: the fold refuses any id never taken.
Id = Annotated[int, msgspec.Meta(ge=0, le=2 ** 63 - 1)]
Int = Annotated[int, msgspec.Meta(ge=-(2 ** 63) + 1, le=2 ** 63 - 1)]


def _argument(name: str) -> msgspec.Meta:
    """The name of the call's argument a field holds, where the two names differ."""
    return msgspec.Meta(extra={"argument": name})


GroupIds = Annotated[list[int], _argument("group_ids")]  # the groups an event moves


class GroupRef(msgspec.Struct, frozen=True):
    """How to find a prompt again without storing it (the argument of `Journal.taken`)."""

    idx: int
    task_name: str | None = None
    epoch: int | None = None
    fingerprint: bytes | None = None
    group_id: int | None = None


class TakenGroup(msgspec.Struct, array_like=True, frozen=True):
    """A locator with the group id the journal allocated for it."""

    group_id: Id
    idx: Id
    task_name: str | None = None
    epoch: Int | None = None
    fingerprint: bytes | None = None


class PackedLoaderState(msgspec.Struct, array_like=True, frozen=True):
    """A loader `state_dict()` packed by `loader_state.pack`: a msgpack tree plus the
    digests of the large leaves it references (stored once per segment as blobs)."""

    tree: bytes
    refs: list[bytes] = []


class Taken(msgspec.Struct, tag="taken", array_like=True, frozen=True):
    groups: Annotated[list[TakenGroup], _argument("refs")]
    loader_state: PackedLoaderState | None = None
    dataset_size: Id | None = None  # len(dataset) as the trainer saw it (restore checks it)


class Diverted(msgspec.Struct, tag="diverted", array_like=True, frozen=True):
    groups: GroupIds


# N, the number of rollouts of a group admitted with `rollouts=N` (a bound, not a promise:
# a group of 64k generations is far beyond any trainer, and the cut's columns stay small)
RolloutCount = Annotated[int, msgspec.Meta(ge=1, le=65535)]
RolloutIndex = Annotated[int, msgspec.Meta(ge=0, le=65534)]


class Admitted(msgspec.Struct, tag="admitted", array_like=True, frozen=True):
    groups: GroupIds
    target_step: Int
    policy_version: Int | None = None
    replaces: int | None = None
    rollouts: RolloutCount | None = None  # N: track each of the group's N rollouts


class RolloutRef(msgspec.Struct, array_like=True, frozen=True):
    """One rollout: generation `index` of group `group_id`, as dispatched in `attempt`.

    The argument of `rollout_sealed` (with the data-plane `locator` of its result), of
    `rollout_failed` (no locator) and of `rollout_progress` (the locator of the partial
    result); stored in those events as is."""

    group_id: Id
    index: RolloutIndex
    attempt: Id
    locator: str | None = None


RolloutRefs = Annotated[list[RolloutRef], _argument("refs")]  # the rollouts an event names


class Finished(msgspec.Struct, tag="finished", array_like=True, frozen=True):
    groups: GroupIds
    policy_version: Int | None = None
    locators: list[str] | None = None


class Trained(msgspec.Struct, tag="trained", array_like=True, frozen=True):
    groups: GroupIds
    step: Int


class Discarded(msgspec.Struct, tag="discarded", array_like=True, frozen=True):
    groups: GroupIds
    reason: str


class RolloutSealed(msgspec.Struct, tag="rollout_sealed", array_like=True, frozen=True):
    rollouts: RolloutRefs
    policy_version: Int | None = None
    # the oldest version of their tokens when other weights made some of them; the fold keeps
    # the newest and the oldest of these and of the prefix a seal completes
    since_version: Int | None = None


class RolloutFailed(msgspec.Struct, tag="rollout_failed", array_like=True, frozen=True):
    rollouts: RolloutRefs
    reason: str


class RolloutProgress(msgspec.Struct, tag="rollout_progress", array_like=True, frozen=True):
    """A durable prefix of one rollout's result: `tokens` generated so far (and `turn`, the
    turns a multi-turn rollout completed), its row at `ref.locator`, generated by weights
    `policy_version`. The newest of an attempt supersedes the older; a seal or a failure of
    the rollout ends it.

    It names one rollout (its figures are that rollout's), stored as one `RolloutRef` as
    every journal has it on disk; `rollouts` names it as the seal's and the failure's do."""

    ref: RolloutRef
    tokens: Id
    turn: Id | None = None
    policy_version: Int | None = None
    since_version: Int | None = None  # as `RolloutSealed.since_version`

    @property
    def rollouts(self) -> tuple[RolloutRef]:
        """The rollouts it names: `ref`, alone."""
        return (self.ref,)


class CheckpointBegun(msgspec.Struct, tag="checkpoint_begun", array_like=True, frozen=True):
    step: Int


class CheckpointCommitted(msgspec.Struct, tag="checkpoint_committed", array_like=True, frozen=True):
    step: Int


class IdentityRecorded(msgspec.Struct, tag="identity_recorded", array_like=True, frozen=True):
    """The run identity from this commit on (`identity.py`): per key, the fingerprint of its
    value. It replaces the one recorded before as a whole; no group moves."""

    digests: Annotated[dict[str, bytes], _argument("identity")]


class KeptAtLead(msgspec.Struct, array_like=True, frozen=True):
    """What a restore kept of the work of weights `lead` steps newer than the checkpoint it
    restored (0: its own or older): groups handed back whole (admitted without rollouts=),
    sealed rollouts, prefixes and their tokens."""

    lead: Id
    groups: Id
    rollouts: Id
    prefixes: Id
    tokens: Id


class Restored(msgspec.Struct, tag="restored", array_like=True, frozen=True):
    """What the restore that began this history decided, recorded in the resume's first commit
    (`replay.restores` lists them; no group moves): it restored LSN `point`, the checkpoint of
    `step` (None: the empty state), abandoning the history after it up to `crash_lsn` (the
    crash point; `point` when nothing was abandoned), at `time` (seconds since the epoch),
    under `max_policy_lag`. `kept`: the generated work it handed back, by lead; `dropped`:
    results and prefixes it did not keep, by reason ("beyond_lag", "rows_lost", "identity");
    `regenerate`: the rollouts (and groups admitted without rollouts=) it handed back to
    generate; `seconds_lost`: the generation seconds of the dropped results whose rows
    recorded theirs (None: none did)."""

    point: Id
    step: Int | None
    crash_lsn: Id
    time: float
    max_policy_lag: Id = 0
    kept: list[KeptAtLead] = []
    dropped: dict[str, Id] = {}
    regenerate: Id = 0
    seconds_lost: float | None = None


# every event kind's record, in the order of the table of kinds (`kinds.KINDS`)
EVENT_TYPES = (Taken, Diverted, Admitted, Finished, Trained, Discarded, RolloutSealed, RolloutFailed,
               RolloutProgress, CheckpointBegun, CheckpointCommitted, IdentityRecorded, Restored)
Event = Union[EVENT_TYPES]  # type: ignore[valid-type]


class Blob(msgspec.Struct, array_like=True, frozen=True):
    """A large loader-state leaf, written the first time a segment references it."""

    digest: bytes
    data: bytes


class Commit(msgspec.Struct, array_like=True, frozen=True):
    """One atomic unit: all its events are durable, or none."""

    lsn: int
    events: list[Event]
    blobs: list[Blob] = []


commit_encoder = msgspec.msgpack.Encoder()
commit_decoder = msgspec.msgpack.Decoder(Commit)
