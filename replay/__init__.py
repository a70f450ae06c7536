"""replay: restore the state a trainer resumes from, check everything on the way, rehydrate.

    from replay import restore
    state = restore(path, dataset=ds, collate_fn=fn)
    dl.load_state_dict(state.loader_state)
    j = Journal.open(path, resume=state)

    report = verify(path)            # the whole chain of checks -> VerifyReport
    report = audit(path)             # exactly-once per loader epoch -> AuditReport
    rescue(path, new_dir)            # a damaged journal: continue the run in a fresh directory

    dp = LocalDataPlane("run/rows")  # or ObjectStoreDataPlane(url, options): snapshot.DataPlane

`replay.cli` (`journal-inspect`) renders these reports; nothing here imports it.
"""

from journal import Progress
from journal.fingerprint import fingerprint

from .errors import (ChecksumMismatch, CorruptRecord, CountMismatch, DamagedCutWarning,
                     DamagedJournalWarning, FirstStartWarning, IdentityChanged, JournalCorrupt, JournalMismatch,
                     ManifestMissing, MissingFile, NothingToRestore, OrphanFile, OwnershipError, RestoreError,
                     ReplicaChanged, ReplicaCorrupt, ReplicaGap, ReplicaUnreachable, RowChanged,
                     RowChangedWarning, RowMismatch, RowMissing, SchemaMismatch, TwoOwners, Unreadable,
                     UnsafePath)
from .errors import (DataPlaneError, DataPlaneIOError, DataPlaneUnreachable, InvalidLocator, RowConflict,
                     RowsCorrupt, RowsNotFound, RowsNotStorable)
from .data_plane import LocalDataPlane, ObjectStoreDataPlane
from .audit import audit
from .recovered_state import BeyondLag, KeptWork, RecoveredGroup, RecoveredRollout, RecoveredState
from .reports import AuditReport, NotAJournal, VerifyReport
from .restore import restore
from .rescue import RescueReport, rescue
from .restores import RestoreRow, RestoresReport, restores
from .verify import verify
from .session import (AsyncSession, BatchMismatch, BatchShapeError, CheckpointUnsaved, LoadWeightsFailed,
                      RolloutWork, RowOutOfRange, RowsRegeneratedWarning, Session, SessionError,
                      StepBeforeCheckpoint, TakenTwice, Work, durable_file)

__all__ = [
    "Session", "AsyncSession", "Work", "RolloutWork", "SessionError", "LoadWeightsFailed", "BatchShapeError", "durable_file",
    "RowOutOfRange", "BatchMismatch", "TakenTwice", "StepBeforeCheckpoint", "CheckpointUnsaved", "RowsRegeneratedWarning",
    "restore", "RecoveredState", "RecoveredGroup", "RecoveredRollout", "Progress", "fingerprint",
    "BeyondLag", "KeptWork", "restores", "RestoresReport", "RestoreRow",
    "verify", "VerifyReport", "audit", "AuditReport",
    "NotAJournal", "rescue", "RescueReport",
    "RestoreError", "ManifestMissing", "UnsafePath", "MissingFile", "OrphanFile", "ChecksumMismatch",
    "SchemaMismatch", "CountMismatch", "CorruptRecord", "TwoOwners", "JournalMismatch",
    "JournalCorrupt", "OwnershipError", "NothingToRestore", "Unreadable", "IdentityChanged", "RowMissing", "RowMismatch", "RowChanged", "RowChangedWarning",
    "DamagedCutWarning", "DamagedJournalWarning", "FirstStartWarning",
    "ReplicaGap", "ReplicaCorrupt", "ReplicaUnreachable", "ReplicaChanged",
    "LocalDataPlane", "ObjectStoreDataPlane", "DataPlaneError", "InvalidLocator", "RowsNotFound",
    "RowConflict", "RowsCorrupt", "RowsNotStorable", "DataPlaneUnreachable", "DataPlaneIOError",
]
