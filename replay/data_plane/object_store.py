"""`ObjectStoreDataPlane`: rows as immutable objects in a bucket, through obstore.

It takes what the journal's replica takes (`journal.replica.Location`): a URL, `s3://`,
`gs://`, `az://`, `file://` or `memory://`, with `options` the keyword arguments of
`obstore.store.from_url`, an obstore store, or a Location. Rows live under `<url>/<prefix>/<locator>`
(`prefix` "rows" by default), so it may share the replica's URL: the journal ignores objects
that are not its own (and lists them once when its replica opens).

* put: one conditional PUT (`mode="create"`); when an object is there already it is read
  back: the same bytes count as done (a retried upload whose first answer was lost), other
  bytes are `RowConflict`. An acknowledged PUT is durable by the store's contract.
* has: HEAD. get: GET. delete: HEAD and DELETE per locator. locators: LIST of the prefix.
  save: downloads into the cut. import_cut: uploads as put does.
* Every request is retried under the replica's retry policy (`journal.replica.retry`) while
  the store fails for `retry_seconds`, then `DataPlaneUnreachable` names the object and the
  last error. The store's verdicts (no such object, permission denied, a request it does not
  support: `journal.replica.store.store_verdicts`) are not retried; those other than "not
  found" become a `DataPlaneError` naming the object.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Iterator

from journal import Group
from journal.replica import retry
from journal.replica.store import Location, store_verdicts
from journal.replica.errors import said
from snapshot.data_plane import cut_rows
from snapshot.errors import DataPlaneError, DataPlaneUnreachable, RowConflict, RowsNotFound

from . import names
from .base import RowStore
from .rows import decode_rows

RETRY_SECONDS = 30.0


class ObjectStoreDataPlane(RowStore):
    """Rows as objects `<prefix>/g<id>.rows` and `<prefix>/g<id>-r<index>-a<attempt>.rows`.
    Implements `snapshot.DataPlane`; see there for each method's contract. Pickles as its
    arguments (Ray actors that put rows get their own client)."""

    def __init__(self, url_or_store: Any, options: dict | None = None, prefix: str = "rows",
                 retry_seconds: float = RETRY_SECONDS):
        if not isinstance(prefix, str) or prefix and any(
                p in ("", ".", "..") or "\\" in p for p in prefix.split("/")):
            raise ValueError(f"prefix {prefix!r} must be a relative object path without '.', "
                             "'..' or empty parts")
        self._args = (url_or_store, options, prefix, retry_seconds)
        location = Location.of(url_or_store, options, options_arg="options")
        self.where = location.where
        self.prefix, self.retry_seconds = prefix, retry_seconds
        self._bucket = location.open(role="data plane", options_arg="options")
        self._verdicts = store_verdicts()

    def __reduce__(self):
        return type(self), self._args

    def __repr__(self) -> str:
        return f"ObjectStoreDataPlane({self.where!r}, prefix={self.prefix!r})"

    def _key(self, locator: str) -> str:
        locator = names.checked(locator, f"{self.where} (prefix {self.prefix!r})")
        return f"{self.prefix}/{locator}" if self.prefix else locator

    def _retrying(self, fn: Callable[[], Any], what: str, key: str) -> Any:
        try:
            return retry.retrying(fn, f"{what} object {key}",
                                  final=(FileNotFoundError, DataPlaneError) + self._verdicts,
                                  deadline=time.monotonic() + self.retry_seconds)
        except self._verdicts as exc:
            raise DataPlaneError(f"data plane {self.where}: {what} object {key} failed: "
                                 f"{said(exc)}") from exc
        except retry.GaveUp as exc:
            raise DataPlaneUnreachable(
                f"data plane {self.where}: {what} object {key} failed {exc.tries} times in "
                f"{self.retry_seconds:g} s, the last with {said(exc.last)}; check that the "
                "store is reachable, then retry") from exc.last

    def _store(self, locator: str, data: bytes) -> None:
        """`data` as the object of `locator`, unless other bytes are there already."""
        key = self._key(locator)
        if self._retrying(lambda: self._bucket.create(key, data), "upload", key):
            return
        if self._retrying(lambda: self._bucket.get(key), "read back", key) != data:
            raise RowConflict(f"data plane {self.where}: object {key} already holds other rows; "
                              "rows under a locator never change (is a second writer producing "
                              "the same group, rollout and attempt?)")

    def get(self, locator: str) -> Any:
        key = self._key(locator)
        try:
            data = self._retrying(lambda: self._bucket.get(key), "read", key)
        except FileNotFoundError:
            raise RowsNotFound(f"data plane {self.where}: no rows under {locator} (object {key} "
                               "does not exist): deleted, or never put") from None
        return decode_rows(data, f"{self.where} object {key}")

    def has(self, locator: str) -> bool:
        key = self._key(locator)
        return self._retrying(lambda: self._bucket.exists(key), "look up", key)

    def delete(self, locators: Iterable[str]) -> int:
        keys = [self._key(loc) for loc in locators]
        gone = 0
        for key in keys:
            if self._retrying(lambda: self._bucket.exists(key), "look up", key):
                self._retrying(lambda: self._bucket.delete(key), "delete", key)
                gone += 1
        return gone

    def locators(self) -> Iterator[str]:
        start = f"{self.prefix}/" if self.prefix else ""
        listed = self._retrying(lambda: self._bucket.list(self.prefix or None), "list",
                                start + "*")
        return (name[len(start):] for name in listed
                if name.startswith(start) and names.is_locator(name[len(start):]))

    def save(self, directory: str, groups: list[Group]) -> None:
        for g in groups:
            for locator, required in cut_rows(g):
                key, path = self._key(locator), os.path.join(directory, locator)

                def download() -> None:
                    if os.path.exists(path):  # what a failed try wrote
                        os.unlink(path)
                    self._bucket.download(key, path)
                try:
                    self._retrying(download, "download", key)
                except FileNotFoundError:
                    if os.path.exists(path):
                        os.unlink(path)
                    if not required:
                        continue
                    raise RowsNotFound(f"data plane {self.where}: the rows of group {g.group_id} "
                                       f"(object {key}) are missing, so the cut cannot carry "
                                       "them") from None
