"""journal: the durable, checksummed ownership log (see README "Format" for the byte layout)."""

from .errors import (JournalClosed, JournalCorrupt, JournalError, JournalFailed, JournalLocked,
                     OwnershipError)
from .events import (Admitted, Blob, CheckpointBegun, CheckpointCommitted, Commit, Discarded,
                     Diverted, EVENT_KINDS, Event, Finished, GroupRef, LIVE_OWNERS, Owner, Taken,
                     TakenGroup, Trained)
from .fold import Group, LoaderState, State, apply, fold
from .loader_state import LoaderStateError
from .reader import MODES, Problem, Reader, Record, Segment, Timeline, list_segments, read_segment_bytes
from .vfs import DEFAULT_FS, File, FileSystem, OsFileSystem
from .writer import AsyncJournal, Journal, Transaction, TORN_DIR, LOCK_NAME

__all__ = [
    "Journal", "Transaction", "AsyncJournal", "GroupRef", "Owner", "LIVE_OWNERS", "Group", "State",
    "LoaderState", "apply", "fold", "Reader", "Record", "Problem", "Segment", "Timeline", "MODES",
    "list_segments", "read_segment_bytes", "FileSystem", "OsFileSystem", "File", "DEFAULT_FS",
    "JournalError", "OwnershipError", "JournalCorrupt", "JournalFailed", "JournalLocked",
    "JournalClosed", "LoaderStateError", "Commit", "Event", "EVENT_KINDS", "Taken", "TakenGroup",
    "Diverted", "Admitted", "Finished", "Trained", "Discarded", "CheckpointBegun",
    "CheckpointCommitted", "Blob", "TORN_DIR", "LOCK_NAME",
]
