"""replay: restore the state a trainer resumes from, check everything on the way, rehydrate.

    from replay import restore
    state = restore(path, dataset=ds, collate_fn=fn)
    dl.load_state_dict(state.loader_state)
    j = Journal.open(path, resume=state)
"""

from .errors import (ChecksumMismatch, CorruptRecord, CountMismatch, JournalCorrupt, JournalMismatch,
                     ManifestMissing, MissingFile, OrphanFile, OwnershipError, RestoreError,
                     RowChanged, RowChangedWarning, RowMismatch, RowMissing, SchemaMismatch,
                     TwoOwners, Unreadable, UnsafePath)
from .fingerprint import fingerprint
from .rehydrate import ROW_CHANGED_POLICIES
from .recovered import RecoveredGroup, RecoveredRollout, RecoveredState
from .restore import restore

__all__ = [
    "restore", "RecoveredState", "RecoveredGroup", "RecoveredRollout", "fingerprint", "ROW_CHANGED_POLICIES",
    "RestoreError", "ManifestMissing", "UnsafePath", "MissingFile", "OrphanFile", "ChecksumMismatch",
    "SchemaMismatch", "CountMismatch", "CorruptRecord", "TwoOwners", "JournalMismatch",
    "JournalCorrupt", "OwnershipError", "Unreadable", "RowMissing", "RowMismatch", "RowChanged", "RowChangedWarning",
]
