"""Every error `restore` raises, all subclasses of `RestoreError` (DESIGN 6.1).

Checks 1-8 are the cut's (defined in `snapshot`, re-exported here); check 9
wraps the journal's own errors so one `except RestoreError` catches all;
check 10 is rehydration's.
"""

import journal
from snapshot.errors import (ChecksumMismatch, CorruptRecord, CountMismatch, JournalMismatch,
                             ManifestMissing, MissingFile, OrphanFile, RestoreError, SchemaMismatch,
                             TwoOwners, UnsafePath)


class JournalCorrupt(RestoreError, journal.JournalCorrupt):
    """9. The journal tail is damaged or breaks the chain (names segment, offset, LSN)."""


class OwnershipError(RestoreError, journal.OwnershipError):
    """9. The journal tail breaks the ownership rules (names the group and LSN)."""


class Unreadable(RestoreError):
    """A journal file cannot be read at all (permissions, a directory where a segment belongs)."""


class RowMissing(RestoreError):
    """10. `dataset[idx]` does not exist (the dataset shrank)."""


class RowMismatch(RestoreError):
    """10. The row at `idx` says it is another idx or task (the dataset was reordered)."""


class RowChanged(RestoreError):
    """10. The row's content fingerprint differs from the one recorded when it was taken."""


class RowChangedWarning(UserWarning):
    """What `on_row_changed="warn"` warns with (the message is `RowChanged`'s)."""


__all__ = ["RestoreError", "ManifestMissing", "UnsafePath", "MissingFile", "OrphanFile",
           "ChecksumMismatch", "SchemaMismatch", "CountMismatch", "CorruptRecord", "TwoOwners",
           "JournalMismatch", "JournalCorrupt", "OwnershipError", "Unreadable", "RowMissing", "RowMismatch",
           "RowChanged", "RowChangedWarning"]
