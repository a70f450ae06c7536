"""What restore, verify, audit and journal-inspect read: a journal or cut directory, or a replica
(object storage) whose history is fetched into a temporary directory first
(`journal.replica.fetch`) and then read with every local check.

A replica's read errors (`journal.replica.ReplicaGap`, ...) surface as the `RestoreError`
subclasses of the same names (`replay.errors`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator

from journal.replica import ReplicaReadError
from journal.replica.store import Location, is_replica
from journal.replica.fetch import Listing, fetch_in_steps, fetched
from snapshot import RestoreError
from snapshot.manifest import decode as decode_manifest

from .errors import restore_error_of


class Source:
    """`path` read as a directory, or (a `Location`, a URL or an obstore store, with
    `replica_options` the keyword arguments of `obstore.store.from_url`) as a replica. `where`
    names it in reports and messages: the directory, or the replica's URL."""

    def __init__(self, path: Any, replica_options: dict | None = None):
        self.location = Location.of(path, replica_options) if is_replica(path) else None
        self.path = path if self.location is None else None
        self.where = self.location.where if self.location is not None else path

    @contextlib.contextmanager
    def directory(self, *, at_end: bool) -> Iterator[str]:
        """The directory to read: `path` itself, or all of the replica's history fetched into a
        temporary one (removed afterwards; `at_end`: a gap ends its timeline)."""
        if self.location is None:
            yield self.path
            return
        with as_restore_errors(), fetched(self.listing(at_end=at_end)) as tmp:
            yield tmp

    def fetch_in_steps(self, into: str, at) -> Iterator[bool]:
        """`journal.replica.fetch.fetch_in_steps` of the replica into `into`, for a restore at `at`."""
        with as_restore_errors():
            yield from fetch_in_steps(self.listing(at_end=at == "end"), into, at)

    def listing(self, *, at_end: bool) -> Listing:
        return Listing(self.location, at_end=at_end, manifest_files=_manifest_files)

    def report(self, run, *, at_end: bool, **kwargs):
        """`run(directory, **kwargs)` (verify, audit) over the replica's history, the report
        naming the replica (`where`), not the temporary directory."""
        with self.directory(at_end=at_end) as local:
            report = run(local, **kwargs)
        report.path = self.where
        return report


@contextlib.contextmanager
def as_restore_errors() -> Iterator[None]:
    """A replica's read error raised inside, as its `RestoreError` subclass."""
    try:
        yield
    except ReplicaReadError as exc:
        raise restore_error_of(exc) from exc


def _manifest_files(data: bytes, where: str) -> Iterable[str] | None:
    """The files a fetched MANIFEST.json names; None when it does not decode or names an unsafe
    path (the local checks report it, and a restore passes the cut over)."""
    try:
        return decode_manifest(data, where).files
    except RestoreError:
        return None
