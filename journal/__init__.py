"""journal: the durable, checksummed ownership log of an asynchronous RL trainer.

Every ownership transition of every prompt group (taken, diverted, admitted,
finished, trained, discarded), every checkpoint marker and every change of the
run identity (`identity.py`) is one event; one or more events form a commit
with the next LSN; `Journal` appends commits to segment files and returns
only after they are fsynced (sync="always").

Format (byte by byte in README "Format"): segments `<timeline>-<first lsn>.wal`
with a 64-byte header (magic, version, run id, timeline, parent timeline,
first LSN, chain seed, CRC); frames of (length, CRC-32 of payload, chain
checksum) holding length-prefixed msgpack commits (`events.py`). The chain
checksum runs over every commit of the history, across segments and branch
points, so a missing, stale or reordered frame is detected.

Recovery rules (`reader.py`): a bad frame in the last segment of a timeline
with no intact frame after it, and no later branch off it at or after it, is a
torn tail, never acknowledged: `Journal.open`
copies it into `torn/` and truncates it. Any other damage is `JournalCorrupt`
naming segment, offset and LSN (or, for inspection, `point_in_time` and
`salvage` readers). The state is always rebuilt by `fold.apply`, the same
function that checked each commit before it was written.
"""

from .errors import (JournalClosed, JournalCorrupt, JournalError, JournalFailed, JournalIOError,
                     JournalLocked, JournalWarning, OwnershipError, RolloutEnded, StaleAttempt, TransactionClosed)
from .errors import StateFileCorrupt
from .replica.errors import ReplicaConflict, ReplicaError, ReplicaTimeout
from .events import (Admitted, Blob, CheckpointBegun, CheckpointCommitted, Commit, Discarded,
                     Diverted, EVENT_KINDS, Event, Finished, GroupRef, IdentityRecorded, LIVE_OWNERS, Owner,
                     RolloutFailed, RolloutProgress,
                     RolloutRef, RolloutSealed, Taken,
                     TakenGroup, Trained)
from .fold import Group, LoaderState, Progress, Rollouts, SampledRow, State, apply, fold, fold_records
from .history import checkpoint_markers
from .loader_state import LoaderStateError
from .resume import ResumePlan
from .reader import MODES, Problem, ProblemKind, Reader, Record, Segment, Timeline, list_segments, read_segment_bytes
from .vfs import DEFAULT_FS, File, FileSystem, OsFileSystem
from .async_journal import AsyncJournal
from . import state_file
from .writer import Journal, Transaction, TORN_DIR, LOCK_NAME

__all__ = [
    "Journal", "Transaction", "AsyncJournal", "ResumePlan", "GroupRef", "RolloutRef", "RolloutSealed",
    "RolloutFailed", "RolloutProgress", "Progress", "RolloutEnded", "Owner", "LIVE_OWNERS", "Group", "Rollouts", "State", "LoaderState",
    "SampledRow", "apply", "checkpoint_markers", "fold", "fold_records", "Reader", "Record",
    "Problem", "ProblemKind", "Segment", "Timeline", "MODES",
    "list_segments", "read_segment_bytes", "FileSystem", "OsFileSystem", "File", "DEFAULT_FS",
    "JournalError", "OwnershipError", "StaleAttempt", "JournalCorrupt", "JournalFailed", "JournalLocked",
    "JournalClosed", "JournalIOError", "TransactionClosed", "JournalWarning", "LoaderStateError", "Commit", "Event", "EVENT_KINDS", "Taken", "TakenGroup",
    "Diverted", "Admitted", "Finished", "Trained", "Discarded", "CheckpointBegun",
    "CheckpointCommitted", "IdentityRecorded", "Blob", "TORN_DIR", "LOCK_NAME",
    "ReplicaError", "ReplicaConflict", "ReplicaTimeout", "StateFileCorrupt", "state_file",
]
