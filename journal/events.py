"""The one schema of the journal: owners, locators and the event records (msgspec tagged structs).

Events are encoded as msgpack arrays whose first element is the tag, so a
frame costs a few bytes per group. Adding a field at the end with a default is
a compatible change; anything else bumps `FORMAT_VERSION` in `format.py`.
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


# Every integer a commit stores must survive a cut, whose tables are int64 columns with
# -2**63 meaning "none" (snapshot/tables.py): wider values or the sentinel were accepted here,
# written durably, and then made every compaction fail (ValueError) or wrote a cut its own
# reader rejects. Allocated ids and row numbers are never negative (a cut rejects negative
# ones). Checked where commits are encoded (the writer's decode gate) and when they are read.
# (Group ids named by a transition need no bound: the fold rejects any id never taken.)
Id = Annotated[int, msgspec.Meta(ge=0, le=2 ** 63 - 1)]
Int = Annotated[int, msgspec.Meta(ge=-(2 ** 63) + 1, le=2 ** 63 - 1)]


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
    groups: list[TakenGroup]
    loader_state: PackedLoaderState | None = None
    dataset_size: Id | None = None  # len(dataset) as the trainer saw it (restore checks it)


class Diverted(msgspec.Struct, tag="diverted", array_like=True, frozen=True):
    groups: list[int]


# N, the number of rollouts of a group admitted with `rollouts=N` (a bound, not a promise:
# a group of 64k generations is far beyond any trainer, and the cut's columns stay small)
RolloutCount = Annotated[int, msgspec.Meta(ge=1, le=65535)]
RolloutIndex = Annotated[int, msgspec.Meta(ge=0, le=65534)]


class Admitted(msgspec.Struct, tag="admitted", array_like=True, frozen=True):
    groups: list[int]
    target_step: Int
    policy_version: Int | None = None
    replaces: int | None = None
    rollouts: RolloutCount | None = None  # N: track each of the group's N rollouts


class RolloutRef(msgspec.Struct, array_like=True, frozen=True):
    """One rollout: generation `index` of group `group_id`, as dispatched in `attempt`.

    The argument of `rollout_sealed` (with the data-plane `locator` of its result) and of
    `rollout_failed` (no locator); stored in those events as is."""

    group_id: Id
    index: RolloutIndex
    attempt: Id
    locator: str | None = None


class Finished(msgspec.Struct, tag="finished", array_like=True, frozen=True):
    groups: list[int]
    policy_version: Int | None = None
    locators: list[str] | None = None


class Trained(msgspec.Struct, tag="trained", array_like=True, frozen=True):
    groups: list[int]
    step: Int


class Discarded(msgspec.Struct, tag="discarded", array_like=True, frozen=True):
    groups: list[int]
    reason: str


class RolloutSealed(msgspec.Struct, tag="rollout_sealed", array_like=True, frozen=True):
    rollouts: list[RolloutRef]
    policy_version: Int | None = None


class RolloutFailed(msgspec.Struct, tag="rollout_failed", array_like=True, frozen=True):
    rollouts: list[RolloutRef]
    reason: str


class CheckpointBegun(msgspec.Struct, tag="checkpoint_begun", array_like=True, frozen=True):
    step: Int


class CheckpointCommitted(msgspec.Struct, tag="checkpoint_committed", array_like=True, frozen=True):
    step: Int


Event = Union[Taken, Diverted, Admitted, Finished, Trained, Discarded, RolloutSealed, RolloutFailed,
              CheckpointBegun, CheckpointCommitted]

EVENT_KINDS = ("taken", "diverted", "admitted", "finished", "trained", "discarded",
               "rollout_sealed", "rollout_failed", "checkpoint_begun", "checkpoint_committed")


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
