"""The errors of the replica (object storage): shipping to it, holding its lease."""

from __future__ import annotations

from ..errors import JournalError


class ReplicaError(JournalError):
    """Shipping to or reading from the replica (object storage) failed; `object` names the
    object involved, when there is one."""

    def __init__(self, message: str, *, object: str | None = None):
        super().__init__(message)
        self.object = object


class ReplicaConflict(ReplicaError):
    """An object in the bucket has the name of one being shipped but other bytes. Objects are
    immutable, so shipping stopped; the journal still commits locally."""


class ReplicaTimeout(ReplicaError, TimeoutError):
    """`flush_replica(timeout=)` ran out before everything acknowledged was in the bucket."""


class LeaseLost(ReplicaError):
    """Another writer holds the lease now: this one must stop."""
