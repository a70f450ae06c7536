"""The chain of checks a cut goes through, one exception class per check (DESIGN 6.1).

`replay` re-exports these; `RestoreError` is `replay.RestoreError`. Every
message names the cut directory and the file, LSN or group involved.
"""


class RestoreError(Exception):
    """Base class: a cut or journal cannot be restored as asked."""


class ManifestMissing(RestoreError):
    """1. MANIFEST.json is missing or does not parse."""


class UnsafePath(ManifestMissing):
    """The manifest names a file outside the cut (`..`, an absolute path, a link out)."""


class MissingFile(RestoreError):
    """2. A file the manifest lists is not in the cut."""


class OrphanFile(RestoreError):
    """3. A file in the cut is not listed by the manifest."""


class ChecksumMismatch(RestoreError):
    """4. A file's size or sha256 differs from the manifest (checked before anything is loaded)."""


class SchemaMismatch(RestoreError):
    """5. The cut was written with a schema version this code does not read."""


class CountMismatch(RestoreError):
    """6. The group tables hold other counts than the manifest says."""


class CorruptRecord(RestoreError):
    """7. A record has a bad field (type, range, phase)."""


class TwoOwners(CorruptRecord):
    """7. A group appears in two owners' tables."""


class JournalMismatch(RestoreError):
    """8. The cut's anchor (run id, timeline, LSN, chain) is not on the journal's active history."""
