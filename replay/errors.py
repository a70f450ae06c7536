"""Every error `restore` raises, all subclasses of `RestoreError`: the documented home of them all.

First the chain of checks of a cut (`snapshot.checks.CHECKS`, numbered there: manifest, listed
files, unlisted files, sha256, schema, counts, records, anchor). Those classes are defined
in `snapshot.errors`, because `snapshot` raises them for compaction and retention too and
never imports `replay`; they are re-exported here unchanged, so `replay.RestoreError` and
`snapshot.RestoreError` are one class. Then the errors only restore raises: the journal
tail's own errors and a replica's read errors re-raised as subclasses of both `RestoreError`
and the journal's class (one `except RestoreError` catches all), a file that cannot be read
at all, a changed run identity, and rehydration's. README "Restore" lists them in order.
Last, re-exported too, the errors of a data plane (`snapshot.DataPlane`; not restore errors).
"""

import journal
from journal import replica
from snapshot.errors import (ChecksumMismatch, CorruptRecord, CountMismatch, JournalMismatch,
                             ManifestMissing, MissingFile, OrphanFile, RestoreError, SchemaMismatch,
                             TwoOwners, UnsafePath)
from snapshot.errors import (DataPlaneError, DataPlaneIOError, DataPlaneUnreachable,  # noqa: F401
                             InvalidLocator, RowConflict, RowsCorrupt, RowsNotFound, RowsNotStorable)


class JournalCorrupt(RestoreError, journal.JournalCorrupt):
    """The journal tail is damaged or breaks the chain (names segment, offset, LSN)."""


class OwnershipError(RestoreError, journal.OwnershipError):
    """The journal tail breaks the ownership rules (names the group and LSN)."""


class ReplicaGap(RestoreError, replica.ReplicaGap):
    """The bucket lacks the objects of an LSN range that the history needs (names the timeline
    and the range)."""


class ReplicaCorrupt(RestoreError, replica.ReplicaCorrupt):
    """An object's bytes do not match its name (truncated, replaced), two objects claim the same
    part of a segment, or the bucket holds a name that is not a plain path (names the object)."""


class ReplicaChanged(RestoreError, replica.ReplicaChanged):
    """An object listed a moment ago is gone: something deleted it while the restore ran."""


class ReplicaUnreachable(RestoreError, replica.ReplicaUnreachable):
    """The store kept failing while the replica was read."""


_OF_REPLICA = {replica.ReplicaGap: ReplicaGap, replica.ReplicaCorrupt: ReplicaCorrupt,
               replica.ReplicaChanged: ReplicaChanged, replica.ReplicaUnreachable: ReplicaUnreachable}


def restore_error_of(exc: replica.ReplicaReadError) -> RestoreError:
    """A replica's read error as its `RestoreError` subclass: the same message and attributes."""
    cls = _OF_REPLICA[type(exc)]
    out = cls.__new__(cls, *exc.args)
    out.__dict__.update(vars(exc))
    return out


class NothingToRestore(RestoreError):
    """`restore(..., must_exist=True)` found no history at the path or URL it names (it does not
    exist, is empty, or holds a journal without a commit): most likely a mistyped path."""


class Unreadable(RestoreError):
    """A journal file cannot be read at all (permissions, a directory where a segment belongs)."""


class IdentityChanged(RestoreError):
    """The run identity given to `restore(identity=)` (tokenizer, sampling parameters, prompt
    template, reward version) differs from the one the history recorded at the restore point:
    the recovered rollouts and prefixes were generated under another. `changes` names the keys
    added, removed and changed (`journal.identity.IdentityChanges`)."""

    def __init__(self, message: str, changes=None):
        super().__init__(message)
        self.changes = changes


class RowMissing(RestoreError):
    """Rehydration: `dataset[idx]` does not exist (the dataset shrank)."""


class RowMismatch(RestoreError):
    """Rehydration: the row at `idx` says it is another idx or task (the dataset was reordered)."""


class RowChanged(RestoreError):
    """Rehydration: the row's content fingerprint differs from the one recorded when it was taken."""


class FirstStartWarning(journal.JournalWarning):
    """`restore` found no history at the path or URL it names (it does not exist, is empty, or
    holds no commit): a first start, from the empty state. A caller that has just made a fresh
    run directory may ignore exactly this class; a mistyped path is what it is there for."""


class DamagedCutWarning(journal.JournalWarning):
    """`restore` passed over a damaged or incomplete cut (a check of 1-7 failed) and restored
    the same state from an older cut or the journal; the message names the cut and the check.
    Stale cuts (another branch or run: the anchor, check 8) are passed over without one."""


class DamagedJournalWarning(journal.JournalWarning):
    """`restore` read past damaged frames of the journal that the restored state does not need
    (`snapshot.damaged`): the message names the first and `journal-inspect rescue`, which
    continues the run in a fresh directory; `RecoveredState.damage` lists all of it."""


class RowChangedWarning(UserWarning):
    """What `on_row_changed="warn"` warns with (the message is `RowChanged`'s)."""


__all__ = ["RestoreError", "ManifestMissing", "UnsafePath", "MissingFile", "OrphanFile",
           "ChecksumMismatch", "SchemaMismatch", "CountMismatch", "CorruptRecord", "TwoOwners",
           "JournalMismatch", "JournalCorrupt", "OwnershipError", "ReplicaGap", "ReplicaCorrupt",
           "ReplicaChanged", "ReplicaUnreachable", "NothingToRestore", "Unreadable", "IdentityChanged",
           "RowMissing", "RowMismatch",
           "RowChanged", "RowChangedWarning", "DamagedCutWarning", "DamagedJournalWarning",
           "FirstStartWarning"]
