"""The writer's side of its replica (`journal/replica/`, through `ReplicaLink`), a part of
`Journal`: the lease taken before anything is written, what is durable told to the shipper,
the lease lost made a fail-stop, the bucket waited for."""

from __future__ import annotations

from typing import Any

from .errors import JournalError
from .replica.link import ReplicaLink
from .replica.shipper import open_replica


class ReplicaWiring:
    """The replica of `Journal` (`_replica` is None without `replica=`)."""

    def _open_replica(self, replica: Any, options: dict | None, ship_interval: float,
                      resuming: bool) -> None:
        """Take the replica's lease before anything is written."""
        self._replica = open_replica(replica, options, journal_path=self.path, fs=self.fs,
                                     ship_interval=ship_interval, on_lost=self._lose_lease)
        self._timeline_floor = self._replica.acquire(resuming=resuming)

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
