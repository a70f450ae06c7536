"""The bucket seam: where a replica lives (`Location`), the store opened from it, what that store
can do (declared, checked when a replica opens), the requests made of it (`Bucket`), and the one
parser of `--replica-options`.

`obstore` is imported only when a store is opened, never by `import journal`.
"""

from __future__ import annotations

import collections
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..errors import JournalError
from .errors import ReplicaError, said


@dataclass(frozen=True, eq=False)
class Location:
    """Where a replica lives and how to reach it: `store` is a URL (`s3://`, `gs://`, `az://`,
    `file://`, `memory://`) or an obstore store; `options` are the keyword arguments of
    `obstore.store.from_url` for a URL. `Journal.open(replica=)`, `replay.restore`, `verify`,
    `audit`, `Session.open` and `ObjectStoreDataPlane` take one, or a URL or store and its
    options (`Location.of`); a setting of the journal's own for its store belongs here, so each
    of them passes it on unchanged."""

    store: Any
    options: dict | None = None

    @classmethod
    def of(cls, replica: Any, options: dict | None = None, *,
           options_arg: str = "replica_options") -> "Location":
        """`replica` (a Location, a URL or a store) with `options` as a Location."""
        if not isinstance(replica, Location):
            return cls(replica, options)
        if options:
            raise ValueError(f"{options_arg}= applies to a URL or a store; the Location "
                             f"{replica.where} holds its options")
        return replica

    @property
    def where(self) -> str:
        """How messages and reports name the replica: its URL, else the store's repr."""
        return self.store if isinstance(self.store, str) else repr(self.store)

    def open(self, *, role: str = "replica", options_arg: str = "replica_options") -> "Bucket":
        """The bucket at this location. Messages name what opens it (`role`) and the argument
        that holds the options (`options_arg`)."""
        if not isinstance(self.store, str):
            if self.options:
                raise ValueError(f"{options_arg}= applies to a {role} URL, not to a store object")
            return Bucket(self.store, self.where, role)
        try:
            from obstore.store import from_url
        except ImportError as exc:
            raise JournalError(f"{role} {self.store!r} needs the obstore package: pip install "
                               "'ownership-journal[replica]'") from exc
        try:
            store = from_url(self.store, **(self.options or {}))
        except Exception as exc:  # a bad URL or option: obstore's own classes, not ours
            raise ReplicaError(f"{role} {self.store!r} cannot be opened with {options_arg} keys "
                               f"{sorted(self.options or {})}: {said(exc)}") from exc
        return Bucket(store, self.where, role)


def is_replica(path: Any) -> bool:
    """Whether `path` names a replica (a Location, a URL or an obstore store), not a directory."""
    if isinstance(path, Location):
        return True
    if isinstance(path, str):
        return "://" in path
    return type(path).__module__.split(".")[0] == "obstore"


def parse_options(text: str, flag: str = "--replica-options") -> dict:
    """The JSON object of a command line's `flag` (the keyword arguments of
    `obstore.store.from_url`); ValueError naming what is wrong."""
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{flag} is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ValueError(f"{flag} must be a JSON object (obstore.store.from_url keyword arguments)")
    return options


def supports_cas(store) -> bool:
    """Whether `store` replaces an object only while its ETag is unchanged (obstore's
    `PutMode::Update`), as the writer's lease needs: declared per store class. obstore's local
    store (`file://`) and its HTTP store cannot; an S3 store can unless its `conditional_put`
    is "disabled"."""
    from obstore.store import AzureStore, GCSStore, MemoryStore, S3Store
    if isinstance(store, S3Store):
        return store.config.get("conditional_put") != "disabled"
    return isinstance(store, (GCSStore, AzureStore, MemoryStore))


def store_verdicts() -> tuple[type[BaseException], ...]:
    """The store's answers that trying again does not change: permission, credentials, a bad
    name, a request it does not support, a failed precondition."""
    from obstore import exceptions as ex
    return (ex.PermissionDeniedError, ex.UnauthenticatedError, ex.InvalidPathError,
            ex.NotSupportedError, ex.PreconditionError, ex.AlreadyExistsError,
            ex.UnknownConfigurationKeyError, NotImplementedError)


class Bucket:
    """The requests made of a store (by the replica, a fetch, and `replay.ObjectStoreDataPlane`
    with `role` "data plane"), each raising the store's own exception on failure, and what
    the store can do (`supports_cas`)."""

    def __init__(self, store, where: str, role: str = "replica"):
        import obstore
        from obstore import exceptions
        self._ob, self._exc = obstore, exceptions
        self.store, self.where, self.role = store, where, role
        self.supports_cas = supports_cas(store)
        self.requests: collections.Counter = collections.Counter()  # by kind; not the client's retries

    def list(self, prefix: str | None = None) -> dict[str, int]:
        """name -> size of every object under the store's prefix, or under `prefix` within it
        (paginated LIST)."""
        out, pages = {}, 0
        try:
            for batch in self._ob.list(self.store, prefix=prefix):
                pages += 1
                out.update((m["path"], m["size"]) for m in batch)
            self.requests["LIST"] += max(pages, 1)  # an empty listing is one request too
            return out
        except self._exc.InvalidPathError as exc:
            raise ReplicaError(f"{self.role} {self.where}: the bucket holds an object whose name is not "
                               f"a plain path (a '..', '.' or empty part), so nothing in it is "
                               f"used: {str(exc).splitlines()[0]}; remove that object") from None

    def exists(self, name: str) -> bool:
        self.requests["HEAD"] += 1
        try:
            self._ob.head(self.store, name)
        except FileNotFoundError:
            return False
        return True

    def e_tag(self, name: str) -> str | None:
        """The ETag of object `name` (one HEAD), None when there is none."""
        self.requests["HEAD"] += 1
        try:
            return self._ob.head(self.store, name)["e_tag"]
        except FileNotFoundError:
            return None

    def get(self, name: str) -> bytes:
        self.requests["GET"] += 1
        return bytes(self._ob.get(self.store, name).bytes())

    def get_tagged(self, name: str) -> tuple[bytes, str] | None:
        """The bytes of object `name` and their ETag, None when there is none."""
        self.requests["GET"] += 1
        try:
            got = self._ob.get(self.store, name)
        except FileNotFoundError:
            return None
        return bytes(got.bytes()), got.meta["e_tag"]

    def download(self, name: str, path: str) -> tuple[int, str]:
        """Stream object `name` into the new file `path`; (size, sha256 hex)."""
        digest, size = hashlib.sha256(), 0
        self.requests["GET"] += 1
        with open(path, "xb") as f:
            for chunk in self._ob.get(self.store, name):
                view = memoryview(chunk)
                digest.update(view)
                f.write(view)
                size += len(view)
        return size, digest.hexdigest()

    def create(self, name: str, data) -> bool:
        """Put `data` (bytes or a Path) as `name` unless it exists; False if it existed."""
        self.requests["PUT"] += 1
        try:
            self._ob.put(self.store, name, data, mode="create")
        except self._exc.AlreadyExistsError:
            return False
        return True

    def swap(self, name: str, data, e_tag: str | None) -> str | None:
        """Create object `name` (`e_tag` None) or replace it with `data` while its ETag is still
        `e_tag` (compare-and-swap: `supports_cas`); the new ETag, None when the precondition
        failed."""
        mode = "create" if e_tag is None else {"e_tag": e_tag}
        self.requests["PUT"] += 1
        try:
            return self._ob.put(self.store, name, data, mode=mode)["e_tag"]
        except (self._exc.AlreadyExistsError, self._exc.PreconditionError):
            return None

    def delete(self, name: str) -> None:
        """Delete object `name`; one already gone counts as deleted."""
        self.requests["DELETE"] += 1
        try:
            self._ob.delete(self.store, name)
        except FileNotFoundError:
            pass
