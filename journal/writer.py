"""The writer: `Journal`, the one process that appends to a journal directory.

`Journal` is put together from one part per job: opening, recovery and repair
(`opening.py`), the group commit (`commit_pipeline.py`), the segment files and their policy
(`segments.py`), the replica (`replica_wiring.py`); the transition calls are written once in
`transaction.py`. Here: `open`, the reads of the state, `close`.
"""

from __future__ import annotations

import collections
import os
import threading
import warnings
from typing import Any, Mapping

from . import layout, locks
from .commit_pipeline import RECENT_FRAMES, CommitPipeline, Pending
from .errors import JournalWarning, io_step
from .events import IdentityRecorded, Owner
from .state import Group, State
from .identity import digests
from .opening import Opening, check_journal_dir
from .replica.link import ReplicaLink
from .replica.shipper import open_replica
from .replica_wiring import ReplicaWiring
from .resume import ResumePlan
from .segments import DEFAULT_SEGMENT_BYTES, SegmentFiles, SegmentPlan, SegmentPolicy
from .transaction import Transaction, add_one_event_calls
from .vfs import DEFAULT_FS, OsFileSystem

SYNC_MODES = ("always", "batch", "none")
LOCK_NAME = layout.LOCK_NAME
TORN_DIR = layout.TORN_DIR


def _checked_options(sync: str, segment_bytes: int, identity: Mapping[str, Any] | None) -> dict | None:
    """The digests of `identity` (`journal/identity.py`), once `Journal.open`'s options are
    checked: a bad one raises before anything is opened."""
    if sync not in SYNC_MODES:
        raise ValueError(f"sync must be one of {SYNC_MODES}, not {sync!r}")
    SegmentPolicy(segment_bytes, sync)
    return digests(identity) if identity is not None else None


class Journal(Opening, CommitPipeline, ReplicaWiring):
    """An open journal (single writer). See the package docstring for the format and guarantees.

    Each transition (`taken`, `diverted`, `admitted`, `finished`, `trained`, `discarded`,
    `rollout_sealed`, `rollout_failed`, `begin_checkpoint`, `commit_checkpoint`) appends one
    commit and returns once it is durable (fsynced under sync="always"; see `open`); several
    make one atomic commit in a `transaction()`. Every transition raises, with nothing
    written: `OwnershipError` when a group it names is not in the event's from-owner (the
    ownership table, `journal.kinds.TRANSITIONS`), is named twice or was never taken;
    `ValueError` or `TypeError` naming a bad argument (`journal.arguments`);
    `JournalFailed` after a failed write or fsync (fail-stop: every later call raises it
    too, reads included); `JournalClosed` after `close()`.
    """

    def __init__(self) -> None:  # use Journal.open
        raise TypeError("use Journal.open(path, ...)")

    # -- opening -------------------------------------------------------------------

    @classmethod
    def open(cls, path: str, *, sync: str = "always", sync_interval: float = 0.05,
             segment_bytes: int = DEFAULT_SEGMENT_BYTES, resume: ResumePlan | State | None = None,
             fs: OsFileSystem | None = None, replica: Any = None, replica_options: dict | None = None,
             ship_interval: float = 1.0, identity: Mapping[str, Any] | None = None) -> "Journal":
        """Open (creating if missing) the journal at `path` for writing.

        `path` is a journal directory, an empty one or one that does not exist; anything else
        (a regular file, a cut, a directory of other files) is a `JournalError`. A torn tail
        of the last segment is copied to `torn/` (once) and cut off; what crashes left that is
        provably garbage is removed (`journal.leftovers`). An OS error of any of these steps
        is a `JournalIOError` naming the path and the operation, with no partial file left.
        `resume` is a `journal.ResumePlan` (the `replay.RecoveredState` that `replay.restore`
        returns is one) or a bare `journal.State`: the history continues at its LSN (a new
        branch when that is below the end), after the plan's base cut and with its first
        commit (see `journal/resume.py`).

        Without `resume`, the history on disk is continued as it is. When it continues past
        the latest committed checkpoint, that is, a commit after that checkpoint's
        `checkpoint_begun` (LSN 0 when none was committed) holds an event that moves groups
        (not a checkpoint marker nor an identity), this warns (`JournalWarning`): after a
        crash, a restart must `restore()` and pass `resume=`, or it continues the crashed
        run's history.

        `replica` (a URL such as `s3://bucket/runs/42`, or an obstore store; `replica_options`
        are `obstore.store.from_url`'s keyword arguments) ships the journal to object storage
        (`journal/replica/`): the open takes the writer's lease there (`JournalLocked` while
        another writer holds it; a resume takes it over), then a background thread uploads
        what is durable at least every `ship_interval` seconds.

        `identity` (the run identity, see `record_identity`) is recorded once the history is
        open, unless the history recorded it last: a restart with the same one writes nothing.
        """
        wanted = _checked_options(sync, segment_bytes, identity)
        self = object.__new__(cls)
        self._init_fields(os.path.abspath(path), fs or DEFAULT_FS, sync, sync_interval, segment_bytes)
        with io_step("read the journal directory", self.path):
            check_journal_dir(self.path)
        with io_step("create the journal directory", self.path):
            self.fs.makedirs(self.path)
        self._lock_fd = locks.acquire_writer_lock(self.path, self.fs)
        try:
            if replica is not None:
                self._replica = open_replica(replica, replica_options, journal_path=self.path, fs=self.fs,
                                             ship_interval=ship_interval, on_lost=self._lose_lease)
                self._timeline_floor = self._replica.acquire(resuming=resume is not None)
            with io_step("open and repair the journal", self.path):
                self._remove_leftovers()
                self._recover(resume)
            if wanted is not None and wanted != self._state.identity:
                self._commit([IdentityRecorded(wanted)])
        except BaseException:
            self._release_after_failed_open()
            raise
        texts = self._set_aside_warnings + ([self._open_warning] if self._open_warning is not None else [])
        for text in texts:
            warnings.warn(JournalWarning(text), stacklevel=2)  # at the caller's open
        self._start_background()
        return self

    def _start_background(self) -> None:
        """Once open: the batch syncer (sync="batch") and the shipping (with a replica)."""
        if self.sync == "batch":
            self._syncer = threading.Thread(target=self._sync_loop, name="journal-sync", daemon=True)
            self._syncer.start()
        if self._replica is not None:
            self._note_durable()  # the first note starts the shipping

    def _init_fields(self, path: str, fs: OsFileSystem, sync: str, sync_interval: float,
                     segment_bytes: int) -> None:
        self.path = path
        self.fs = fs
        self.sync = sync
        self.sync_interval = sync_interval
        self.segment_bytes = segment_bytes
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pending: list[Pending] = []
        # the frames written last (`CommitPipeline._write_batch`), and the chain after them
        self._frames: collections.deque = collections.deque(maxlen=RECENT_FRAMES)
        self._written_chain = 0
        self._flushing = False
        self._failed: BaseException | None = None
        self._closed = False
        self._dirty = False
        self._syncer: threading.Thread | None = None
        self._stop_syncer = threading.Event()  # set by close(): the batch syncer exits at once
        self._files = SegmentFiles(fs, path, SegmentPolicy(segment_bytes, sync), sync)
        self._open_warning: str | None = None
        self._set_aside_warnings: list[str] = []  # one per damaged segment the open set aside
        self._segment: SegmentPlan | None = None  # where commits are headed (`_files.active`: on disk)
        self._replica: ReplicaLink | None = None  # with replica=
        self._timeline_floor = 0     # a new timeline is above every timeline a replica knows of
        # the LSN of the history when this writer opened it (after a resume's first commit):
        # the checkpoints begun after it are this writer's (`Transaction._refuse_begin`)
        self._open_lsn = 0
        # what this writer's last compaction left for the next one (`snapshot.compact`: the row
        # ledger of its cut); the journal never reads it
        self.compaction_memo: Any = None

    def _release_after_failed_open(self) -> None:
        """Close what a failed open had opened: the segment it reached, then the lock."""
        self._files.close(failed=True)
        if self._replica is not None:
            self._replica.close(release=True)
        os.close(self._lock_fd)

    # -- state (read-only) -------------------------------------------------------------

    @property
    def lsn(self) -> int:
        """LSN of the last commit (acknowledged or being made durable by another thread).

        Fail-stop covers reads too: after a failed write or fsync the LSN in memory says
        nothing about what is on disk, so this raises JournalFailed like every other call
        (it stays readable after a clean close)."""
        if self._failed is not None:
            self._check_usable()
        return self._state.lsn

    def owner_of(self, group_id: int) -> Owner | None:
        """The owner of group `group_id` as of the last commit: a live one (RESERVED,
        ADMITTED, REPLAY, SPARE) or a terminal one (TRAINED, DROPPED); None for an id this
        history never took. Raises `JournalFailed` or `JournalClosed` as every call does."""
        with self._lock:
            self._check_usable()
            return self._state.owner_of(group_id)

    def group(self, group_id: int) -> Group | None:
        """The record of live group `group_id` as of the last commit (owner, locator, target
        step, rollouts), or None when it is not live (never taken, trained or dropped). The
        fold never changes a record once stored, so it is handed out as is: read it only.
        Raises as `owner_of` does."""
        with self._lock:
            self._check_usable()
            return self._state.live.get(group_id)

    def counts(self) -> dict[Owner, int]:
        """How many groups each owner holds as of the last commit: every `Owner`, the
        terminal ones (TRAINED, DROPPED) included. Raises as `owner_of` does."""
        with self._lock:
            self._check_usable()
            return self._state.owner_counts()

    def groups(self, owner: Owner | None = None) -> list[Group]:
        """Copies of the live groups (of one owner), ordered by group id: each `Group` with its
        locator, owner, target step, policy version, data-plane locator and rollouts. Raises
        as `owner_of` does."""
        with self._lock:
            self._check_usable()
            return [g.copy() for g in self._state.groups(owner)]

    def state_copy(self) -> State:
        """A copy of the state as of the last commit, returned once that commit is durable.

        Appends wait only for the in-memory copy. The copy may include commits still being
        written; it is handed out only after they are durable (this call joins the group
        commit, so steady appends from other threads never hold it back), and a failed write
        raises `JournalFailed` instead."""
        with self._cond:
            self._check_usable()
            state = self._state.copy()
            self._wait(state.lsn)
            return state

    def loader_state(self) -> Any:
        """The loader `state_dict()` the last `taken` carried, decoded (tensors, tuples and
        bytes as they were given); None when no `taken` carried one. Raises as `owner_of`
        does."""
        with self._lock:
            self._check_usable()
            return self._state.loader.decode() if self._state.loader else None

    def identity(self) -> dict[str, bytes] | None:
        """The run identity recorded last (key -> fingerprint of its value, see
        `record_identity`), None when the history recorded none. Raises as `owner_of` does."""
        with self._lock:
            self._check_usable()
            return dict(self._state.identity) if self._state.identity is not None else None

    # -- transitions ---------------------------------------------------------------------

    def transaction(self) -> "Transaction":
        """Collect several transitions into one atomic commit: `with j.transaction() as tx:`
        (see `Transaction`). Returns the transaction, not entered yet; entering it raises
        `JournalFailed` or `JournalClosed` as every call does."""
        return Transaction(self)

    def close(self) -> None:
        """Flush (unless failed) and release the files, the replica (its lease too, unless the
        journal failed) and the writer lock. Idempotent; a journal that failed closes without
        I/O. Raises `JournalFailed` when the
        final flush fails (the files and the lock are released all the same)."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.flush()
                with self._cond:
                    self._files.seal_active()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._stop_syncer.set()
            self._files.close(failed=self._failed is not None)
            if self._replica is not None:
                self._replica.close(release=self._failed is None)
            os.close(self._lock_fd)
            if self._syncer is not None and self._syncer is not threading.current_thread():
                self._syncer.join(timeout=5)

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Journal {self.path} timeline={self.timeline} lsn={self._state.lsn} sync={self.sync}>"


add_one_event_calls(Journal)
