"""journal: the durable, checksummed ownership log of an asynchronous RL trainer.

Every ownership transition of every prompt group (taken, diverted, admitted,
finished, trained, discarded), every checkpoint marker and every change of the
run identity (`identity.py`) is one event; one or more events form a commit
with the next LSN; `Journal` appends commits to segment files and returns
only after they are fsynced (sync="always").

Format (byte by byte in docs/format.md): segments `<timeline>-<first lsn>.wal`
with a 64-byte header (magic, version, run id, timeline, parent timeline,
first LSN, chain seed, CRC); frames of (length, CRC-32 of payload, chain
checksum) holding length-prefixed msgpack commits (`events.py`). The chain
checksum runs over every commit of the history, across segments and branch
points, so a missing, stale or reordered frame is detected.

Recovery rules (`reader.py`): a bad frame in the last segment of a timeline
with no intact frame after it, and no later branch off it at or after it, is a
torn tail, never acknowledged: `Journal.open` (`opening.py`) copies it into
`torn/` and truncates it. Any other damage is `JournalCorrupt` naming segment,
offset and LSN (or, for inspection, a reader in the `point_in_time` or
`salvage` mode, `reader.MODES`). The state is always rebuilt by `fold.apply`,
the same function that checked each commit before it was written.
"""

from .errors import (JournalClosed, JournalCorrupt, JournalError, JournalFailed, JournalIOError,
                     JournalLocked, JournalWarning, OwnershipError, RolloutEnded, StaleAttempt,
                     StateFileCorrupt, TransactionClosed)
from .replica.errors import ReplicaConflict, ReplicaError, ReplicaTimeout
from .events import (Admitted, CheckpointBegun, CheckpointCommitted, Commit, Discarded, Diverted, Event,
                     Finished, GroupRef, IdentityRecorded, KeptAtLead, LIVE_OWNERS, Owner, Restored, RolloutFailed,
                     RolloutProgress, RolloutRef, RolloutSealed, Taken, TakenGroup, Trained)
from .state import Group, Progress, Rollouts, State
from .loader_state import LoaderStateError
from .resume import ResumePlan
from .reader import Reader, Record
from .async_journal import AsyncJournal
from .writer import Journal, Transaction

# What a user needs: the writer, its transactions and its awaitable form, the state and groups
# it hands out, reading a journal back, the events a record holds, and the errors every call
# names. Everything else is importable from its module (`journal.fold`, `journal.reader`, ...).
__all__ = [
    "Journal", "Transaction", "AsyncJournal", "ResumePlan", "State", "Group", "Rollouts", "Progress", "Owner",
    "LIVE_OWNERS", "GroupRef", "RolloutRef", "Reader", "Record",
    "Commit", "Event", "Taken", "TakenGroup", "Diverted", "Admitted", "Finished", "Trained", "Discarded",
    "RolloutSealed", "RolloutFailed", "RolloutProgress", "CheckpointBegun", "CheckpointCommitted", "IdentityRecorded",
    "Restored", "KeptAtLead",
    "JournalError", "OwnershipError", "StaleAttempt", "RolloutEnded", "JournalCorrupt", "JournalFailed", "JournalLocked",
    "JournalClosed", "JournalIOError", "TransactionClosed", "JournalWarning", "LoaderStateError",
    "StateFileCorrupt", "ReplicaError", "ReplicaConflict", "ReplicaTimeout",
]
