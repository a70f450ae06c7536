"""The writer's side of its replica (`journal/replica/`, through `ReplicaLink`), a part of
`Journal`: what is durable told to the shipper, the lease lost made a fail-stop, the bucket
waited for. `Journal.open` opens the replica (`open_replica`) and takes its lease before
anything is written."""

from __future__ import annotations

from .errors import JournalError
from .replica.link import ReplicaLink


class ReplicaWiring:
    """The replica of `Journal` (`_replica` is None without `replica=`)."""

    def _note_durable(self) -> None:
        """Tell the shipper what is durable now (journal lock held)."""
        seg = self._files.active
        self._replica.note_durable(self._durable_lsn, seg.path, seg.file.offset)

    def _lose_lease(self, exc: BaseException) -> None:
        """Another writer took the replica's lease: fail-stop, so this one writes nothing more."""
        with self._cond:
            if self._failed is None:
                self._failed = exc
            self._cond.notify_all()

    @property
    def replica(self) -> ReplicaLink | None:
        """The replica (`journal.replica.link.ReplicaLink`) of a journal opened with `replica=`, else None."""
        return self._replica

    def replica_lag(self):
        """`journal.replica.ReplicaLag`: seconds and LSNs acknowledged but not yet in the bucket."""
        if self._replica is None:
            raise JournalError(f"journal {self.path} has no replica (open it with replica=URL)")
        return self._replica.lag()

    def flush_replica(self, timeout: float | None = None) -> None:
        """Wait until every commit acknowledged so far and every cut written so far is in the
        bucket; `ReplicaTimeout` after `timeout` seconds, `ReplicaConflict` or `JournalFailed`
        (lost lease) when shipping stopped."""
        self.replica_lag()  # refuses a journal without a replica
        self.flush()
        try:
            self._replica.flush(timeout)
        except JournalError:
            self._check_usable()  # a lost lease failed the journal: JournalFailed
            raise
