"""What the writer needs of its replica (`ReplicaLink`); `Journal.open(..., replica=)` makes one
with `open_replica` (`shipper.py`).

The writer knows its replica through five calls: it takes the lease before it writes anything
(`acquire`), says what is durable after each fsync (`note_durable`), waits for the bucket
(`flush`), reports how far behind it is (`lag`) and lets go (`close`). Compaction, given the
live journal, hands its retention decision over (`apply_retention`). The bucket, the lease,
the shipper thread and the rule of retention in the bucket stay inside this package.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from .retention import RetentionDecision, RetentionRequest


class ReplicaLag(NamedTuple):
    """`Journal.replica_lag()`: how far the bucket is behind what the journal acknowledged."""

    seconds: float            # age of the oldest durable commit not yet in the bucket (0: none)
    lsns: int                 # durable LSNs not yet in the bucket
    shipped_lsn: int          # everything up to this LSN is in the bucket
    error: str | None         # the last failure (retrying), or why shipping stopped
    requests: dict            # requests made so far, by kind (LIST pages, GET, HEAD, PUT)


class ReplicaLink(Protocol):
    def acquire(self, *, resuming: bool) -> int:
        """Take the writer's lease (a resume takes it over from a live holder) and refuse a new
        history (no segment on disk, no resume) in a bucket that holds one; from then on local
        retention retires shipped segments only. Returns the timeline floor: every timeline
        this writer creates is above it."""

    def note_durable(self, lsn: int, segment_path: str, end_offset: int) -> None:
        """Commits up to `lsn` are durable; the active segment ends at `end_offset`. Cheap (the
        writer calls it under its lock); the first note starts the shipping."""

    def flush(self, timeout: float | None) -> None:
        """Wait until everything durable now, and every cut on disk now, is in the bucket."""

    def lag(self) -> ReplicaLag:
        ...

    def close(self, *, release: bool) -> None:
        """Ship what is left for a little while, stop, and give the lease up (`release`)."""

    def apply_retention(self, decision: RetentionDecision) -> RetentionRequest:
        """Delete from the bucket what `decision` (compaction's retention) no longer keeps, once
        the kept cuts and the history through them are in the bucket; the request made."""

