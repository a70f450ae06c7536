"""The errors of the chain of checks a cut goes through: one class per check, in the order
and with the numbers of `checks.CHECKS` (a subclass belongs to its base's check); then the
errors of a data plane (`data_plane.DataPlane`), which every implementation raises.

They are defined here, beneath `replay`, because `snapshot` raises them: `read_cut` serves
compaction and retention as well as restore, and `snapshot` never imports `replay`.
`replay.errors` is their documented home: it re-exports these same classes
(`replay.RestoreError is snapshot.RestoreError`) beside the errors only restore raises.
Every message names the cut directory and the file, LSN or group involved.
"""


class RestoreError(Exception):
    """Base class: a cut or journal cannot be restored as asked."""


class ManifestMissing(RestoreError):
    """MANIFEST.json is missing or does not parse."""


class UnsafePath(ManifestMissing):
    """The manifest names a file outside the cut (`..`, an absolute path, a link out)."""


class MissingFile(RestoreError):
    """A file the manifest lists (or a file every cut holds) is not in the cut."""


class OrphanFile(RestoreError):
    """A file in the cut is not listed by the manifest."""


class ChecksumMismatch(RestoreError):
    """A file's size or sha256 differs from the manifest (checked before anything is loaded)."""


class SchemaMismatch(RestoreError):
    """The cut was written with a schema version this code does not read."""


class CountMismatch(RestoreError):
    """The group tables hold other counts than the manifest says."""


class CorruptRecord(RestoreError):
    """A record has a bad field (type, range, phase)."""


class TwoOwners(CorruptRecord):
    """A group appears in two owners' tables."""


class JournalMismatch(RestoreError):
    """The cut's anchor (run id, timeline, LSN, chain) is not on the journal's active history."""


class DataPlaneError(Exception):
    """Base class: a data plane cannot do what was asked (names the store and the locator)."""


class InvalidLocator(DataPlaneError, ValueError):
    """A locator that is not one of this data plane's names (`..`, a path, another store's);
    refused before anything is read, written or deleted."""


class RowsNotFound(DataPlaneError, LookupError):
    """No rows under a locator that `get` or `save` needs."""


class RowConflict(DataPlaneError):
    """Other bytes are already stored under the locator a put or an import writes: rows under a
    locator never change."""


class RowsCorrupt(DataPlaneError):
    """Stored rows do not decode or fail their checksum."""


class RowsNotStorable(DataPlaneError, ValueError):
    """Rows hold a value the row codec does not store (names its place in the rows)."""


class DataPlaneIOError(DataPlaneError, OSError):
    """The data plane's file system failed an operation (names the file and the operation, keeps
    the errno). Rows a failed put was writing are not listed; retry once the disk is healthy."""


class DataPlaneUnreachable(DataPlaneError):
    """The store kept failing a request after every retry (names the object and the last error)."""
