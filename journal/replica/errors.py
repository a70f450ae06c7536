"""The errors of the replica (object storage): shipping to it, holding its lease, reading its
history back. `replay` raises the read errors as `RestoreError` subclasses of the same names
(`replay.errors`), so one `except RestoreError` catches every error of a restore."""

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


class ReplicaReadError(ReplicaError):
    """Reading a replica's history back (for a restore, verify, audit or journal-inspect)
    failed; nothing of it was used."""


class ReplicaGap(ReplicaReadError):
    """The bucket lacks the objects of an LSN range that the history needs."""

    def __init__(self, message: str, *, timeline: int, first_lsn: int, last_lsn: int):
        super().__init__(message)
        self.timeline, self.first_lsn, self.last_lsn = timeline, first_lsn, last_lsn


class ReplicaCorrupt(ReplicaReadError):
    """An object's bytes do not match its name (truncated, replaced), two objects claim the
    same part of a segment, or the bucket holds a name that is not a plain path."""


class ReplicaChanged(ReplicaReadError):
    """An object listed a moment ago is gone (something deleted it while the restore ran)."""


class ReplicaUnreachable(ReplicaReadError):
    """The store kept failing while the replica was read."""


def said(exc: BaseException) -> str:
    """How a message quotes the store's exception: its class and the first line of its message
    (obstore's run long)."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
