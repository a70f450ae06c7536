"""The writer: `Journal`, the one process that appends to a journal directory.

A commit runs in two halves. Under the journal's lock it is checked and folded
into the in-memory state (an illegal transition raises here and nothing is
queued), given the next LSN and encoded. Then one thread, the leader, takes
every queued commit, writes them as one frame and fsyncs once; the other
committers wait for it (group commit). If the write or the fsync fails, the
queued commits are taken back out of the state, the journal fails (fail-stop)
and every later call raises `JournalFailed`: the bytes on disk are unknown,
and retrying an fsync that failed can report success for lost data.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import threading
import warnings
from _thread import allocate_lock as _allocate_lock
from typing import Any, Mapping, Sequence

import msgspec

from . import arguments
from . import format as fmt
from . import layout, leftovers, locks, prealloc, set_aside, state_file
from .errors import (JournalClosed, JournalCorrupt, JournalError, JournalFailed, JournalIOError,
                     JournalWarning, OwnershipError, StateFileCorrupt)
from .events import Blob, CheckpointCommitted, Commit, IdentityRecorded, Owner, Taken, commit_encoder
from .events import commit_decoder as _commit_decoder
from .fold import Group, State, Undo, apply, begin_refused
from .identity import digests
from .reader import Reader
from .replica import ReplicaLink, open_replica
from .resume import ResumePlan
from .transaction import Transaction, add_one_event_calls
from .vfs import DEFAULT_FS, OsFileSystem

SYNC_MODES = ("always", "batch", "none")
DEFAULT_SEGMENT_BYTES = 64 << 20
# The active segment is zero-filled ahead of its frames (sync "always" and "batch"): from its
# size at least PREALLOCATE_MIN bytes, doubling, at most PREALLOCATE_MAX at a time, never past
# segment_bytes. A frame then overwrites allocated zeros, so its fdatasync writes no metadata.
PREALLOCATE_MIN = 64 << 10
PREALLOCATE_MAX = 4 << 20
LOCK_NAME = layout.LOCK_NAME
TORN_DIR = layout.TORN_DIR


class _SegmentPlan:
    """A segment as the committers see it: where commits are headed, before any byte is written."""

    __slots__ = ("header", "path", "size", "blobs", "file")

    def __init__(self, header: fmt.SegmentHeader, path: str, size: int, blobs: set[bytes], file=None):
        self.header = header
        self.path = path
        self.size = size      # bytes planned into it (written or queued)
        self.blobs = blobs    # blob digests stored in it (written or queued)
        self.file = file      # open File once it exists on disk


class _Pending:
    __slots__ = ("segment", "prefixed", "lsn", "undo", "chain", "waiter")

    def __init__(self, segment: _SegmentPlan, prefixed: bytes, lsn: int, undo: Undo, chain: int):
        self.segment, self.lsn, self.undo = segment, lsn, undo
        self.prefixed = prefixed  # the encoded commit as its frame holds it (format.length_prefixed)
        self.chain = chain  # the chain after this commit
        self.waiter = None  # a held lock its committer sleeps on (see Journal._await_commit)


def _wake(pendings: list[_Pending]) -> None:
    """Release the committers sleeping on these commits (journal lock held)."""
    for p in pendings:
        w = p.waiter
        if w is not None:
            p.waiter = None
            w.release()


@contextlib.contextmanager
def _io_step(operation: str, path: str):
    """An OS error of `operation` on `path` becomes a JournalIOError naming both."""
    try:
        yield
    except OSError as exc:
        raise JournalIOError.from_os_error(exc, operation, path) from exc


def _checked_options(sync: str, segment_bytes: int, identity: Mapping[str, Any] | None) -> dict | None:
    """The digests of `identity` (`journal/identity.py`), once `Journal.open`'s options are
    checked: a bad one raises before anything is opened."""
    if sync not in SYNC_MODES:
        raise ValueError(f"sync must be one of {SYNC_MODES}, not {sync!r}")
    if segment_bytes < 4096:
        raise ValueError(f"segment_bytes must be at least 4096, not {segment_bytes}")
    return digests(identity) if identity is not None else None


def _check_journal_dir(path: str) -> None:
    """Refuse a path that is not a journal directory, an empty one or a missing one."""
    kind, entries = layout.dir_kind(path)
    if kind is layout.DirKind.NOT_A_DIRECTORY:
        raise JournalError(f"journal path {path} is not a directory: a journal must be a directory "
                           "(give a new or empty directory, or an existing journal)")
    if kind is layout.DirKind.CUT:
        raise JournalError(f"{path} is a cut directory (it holds {layout.MANIFEST_NAME} or a cut "
                           "file), not a journal: restore it with state = replay.restore(path) and "
                           "resume into a journal directory, Journal.open(journal_dir, resume=state)")
    if kind is layout.DirKind.FOREIGN:
        raise JournalError(f"{path} is neither a journal nor empty (it holds "
                           f"{layout.describe_entries(entries)}, none of them a segment, "
                           f"{layout.LOCK_NAME}, {layout.TORN_DIR}/ or {layout.SNAPSHOTS_DIR}/): "
                           "choose a new or empty directory for the journal")


class Journal:
    """An open journal (single writer). See the package docstring for the format and guarantees.

    Each transition (`taken`, `diverted`, `admitted`, `finished`, `trained`, `discarded`,
    `rollout_sealed`, `rollout_failed`, `begin_checkpoint`, `commit_checkpoint`) appends one
    commit and returns once it is durable (fsynced under sync="always"; see `open`); several
    make one atomic commit in a `transaction()`. Every transition raises, with nothing
    written: `OwnershipError` when a group it names is not in the event's from-owner (the
    ownership table, `journal.fold.TRANSITIONS`), is named twice or was never taken;
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
        with _io_step("read the journal directory", self.path):
            _check_journal_dir(self.path)
        with _io_step("create the journal directory", self.path):
            self.fs.makedirs(self.path)
        self._lock_fd = locks.acquire_writer_lock(self.path, self.fs)
        try:
            if replica is not None:
                self._open_replica(replica, replica_options, ship_interval, resume is not None)
            with _io_step("open and repair the journal", self.path):
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
        if sync == "batch":
            self._syncer = threading.Thread(target=self._sync_loop, name="journal-sync", daemon=True)
            self._syncer.start()
        if self._replica is not None:
            self._note_durable()  # the first note starts the shipping
        return self

    def _init_fields(self, path: str, fs: OsFileSystem, sync: str, sync_interval: float,
                     segment_bytes: int) -> None:
        self.path = path
        self.fs = fs
        self.sync = sync
        self.sync_interval = sync_interval
        self.segment_bytes = segment_bytes
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pending: list[_Pending] = []
        self._flushing = False
        self._failed: BaseException | None = None
        self._closed = False
        self._dirty = False
        self._syncer: threading.Thread | None = None
        self._stop_syncer = threading.Event()  # set by close(): the batch syncer exits at once
        self._sealed: list = []  # sync="none": sealed segments not fsynced yet (flush() does it)
        self._preallocate = sync != "none"  # without fsyncs there is no metadata write to save
        self._next = prealloc.NextSegment(fs, path, segment_bytes) if self._preallocate else None
        self._open_warning: str | None = None
        self._set_aside_warnings: list[str] = []  # one per damaged segment the open set aside
        self._disk_segment: _SegmentPlan | None = None
        self._replica: ReplicaLink | None = None  # with replica=
        self._timeline_floor = 0     # a new timeline is above every timeline a replica knows of
        # the LSN of the history when this writer opened it (after a resume's first commit):
        # the checkpoints begun after it are this writer's (`_refuse_begin`)
        self._open_lsn = 0

    def _release_after_failed_open(self) -> None:
        """Close what a failed open had opened: the segment it reached, then the lock."""
        seg = self._disk_segment
        if seg is not None and seg.file is not None and seg.file.fd >= 0:
            try:
                seg.file.close()
            except OSError:
                pass
        if self._replica is not None:
            self._replica.close(release=True)
        if self._next is not None:
            self._next.close(remove=False)
        os.close(self._lock_fd)

    # -- replica (journal/replica/, through `ReplicaLink`) --------------------------------

    def _open_replica(self, replica: Any, options: dict | None, ship_interval: float,
                      resuming: bool) -> None:
        """Take the replica's lease before anything is written."""
        self._replica = open_replica(replica, options, journal_path=self.path, fs=self.fs,
                                     ship_interval=ship_interval, on_lost=self._lose_lease)
        self._timeline_floor = self._replica.acquire(resuming=resuming)

    def _note_durable(self) -> None:
        """Tell the shipper what is durable now (journal lock held)."""
        seg = self._disk_segment
        self._replica.note_durable(self._durable_lsn, seg.path, seg.file.offset)

    def _lose_lease(self, exc: BaseException) -> None:
        """Another writer took the replica's lease: fail-stop, so this one writes nothing more."""
        with self._cond:
            if self._failed is None:
                self._failed = exc
            self._cond.notify_all()

    @property
    def replica(self) -> ReplicaLink | None:
        """The replica (`journal.replica.ReplicaLink`) of a journal opened with `replica=`, else None."""
        return self._replica

    def replica_lag(self):
        """`journal.replica.ReplicaLag`: seconds and LSNs acknowledged but not yet in the bucket."""
        if self._replica is None:
            raise JournalError(f"journal {self.path} has no replica (open it with replica=URL)")
        return self._replica.lag()

    def flush_replica(self, timeout: float | None = None) -> None:
        """Wait until every commit acknowledged so far and every cut written so far is in the
        bucket; `ReplicaTimeout` after `timeout` seconds, `ReplicaConflict` or `JournalFailed`
        (lost lease) when shipping stopped."""
        self.replica_lag()  # refuses a journal without a replica
        self.flush()
        try:
            self._replica.flush(timeout)
        except JournalError:
            self._check_usable()  # a lost lease failed the journal: JournalFailed
            raise

    def _remove_leftovers(self) -> None:
        """Remove what crashes left that is provably garbage (see `leftovers`): torn/ duplicates
        always (the writer lock is held), a crashed compaction's files only when no compaction
        runs now (the compaction lock is free)."""
        with _io_step("remove duplicate torn-tail copies", os.path.join(self.path, layout.TORN_DIR)):
            leftovers.remove_torn_garbage(self.fs, self.path)
        prepared = os.path.join(self.path, layout.PREPARED_NAME)
        with _io_step("remove the prepared next segment a crash left", prepared):
            prealloc.remove_leftover(self.fs, self.path)
        fd = locks.try_compaction_lock(self.path)
        if fd is None:
            return
        try:
            with _io_step("remove what a crashed compaction left", self.path):
                leftovers.remove_compaction_leftovers(self.fs, self.path)
        finally:
            os.close(fd)

    def _recover(self, resume: ResumePlan | State | None) -> None:
        """Recover the history on disk (`_recover_history`); damage in a segment a cut covers is
        set aside and the recovery runs again (each round moves a segment out: it ends)."""
        plan = ResumePlan.of(resume) if resume is not None else None
        while True:
            try:
                self._recover_history(plan)
                return
            except JournalCorrupt as exc:
                if exc.segment is None or not self._set_aside(exc, plan):
                    raise JournalCorrupt(f"journal {self.path}: {exc}. {_continue_elsewhere(self.path)}",
                                         segment=exc.segment, offset=exc.offset, lsn=exc.lsn) from exc

    def _set_aside(self, damage: JournalCorrupt, plan: ResumePlan | None) -> bool:
        """Move the segment `damage` names into `damaged/` when the newest state checkpoint on
        the active history (and the resume point, if any) covers it, with the history before
        it (`journal.set_aside`); whether it moved. The open then starts from that state file."""
        reader = Reader(self.path, "salvage")
        lineage = reader.lineage() if reader.timelines else []
        if not lineage:
            return False
        state = self._checkpoint_state(reader, lineage, lineage[0].segments[0].first_lsn)
        if state is None:
            return False
        covered = set_aside.covered_segments(
            reader, damage.segment, state.lsn if plan is None else min(state.lsn, plan.fold_state.lsn))
        if not covered:
            return False
        moved = set_aside.move_aside(self.fs, self.path, covered)
        older = [os.path.basename(p) for p in moved[:-1]]
        self._set_aside_warnings.append(
            f"journal {self.path}: segment {damage.segment} is damaged ({damage}); the cut at LSN "
            f"{state.lsn} covers it, so it was moved to {moved[-1]}"
            + (f", with the {len(older)} older segment(s) of the history before it ("
               f"{', '.join(older)}), so that the history on disk starts after it" if older else "")
            + ". Nothing was deleted; the journal goes on from the cut's state")
        return True

    def _recover_history(self, plan: ResumePlan | None) -> None:
        self._refuse_damaged_resume(plan)
        reader = Reader(self.path, "strict")
        self._repair_torn(reader)
        lineage = reader.lineage() if reader.timelines else []
        first_lsn = lineage[0].segments[0].first_lsn if lineage else 1
        self.run_id = reader.run_id or (plan.run_id if plan else None) or secrets.token_bytes(16)
        self.timeline = lineage[-1].timeline if lineage else 1
        first_commit = list(plan.first_commit) if plan is not None else []
        if plan is None:
            state, end_lsn, end_blobs = self._fold_on_disk(reader, lineage, first_lsn)
        else:
            end_lsn, end_blobs = self._check_resume_point(reader, lineage, first_lsn, plan.fold_state)
            state = plan.fold_state.copy()
            if state.lsn < end_lsn and _rewrites_tail(reader, state, first_commit):
                first_commit = []  # the tail holds it already: continue the timeline at its end
        # ids are never reused, not even those allocated on a dead tail (the fold of a single
        # timeline has seen every id it allocated)
        top_gid = reader.max_group_id() if plan is not None or len(reader.timelines) > 1 else -1
        state.next_group_id = max(state.next_group_id, top_gid + 1, plan.group_id_floor if plan else 0)
        branching = plan is not None and (state.lsn < end_lsn or not lineage and state.lsn > 0)
        segment = self._open_segment(reader, lineage, state, end_lsn, end_blobs, branching)
        self._state = state
        self._segment = self._disk_segment = segment
        self._durable_lsn = state.lsn
        if plan is not None:
            point = plan.fold_state.lsn  # where the plan's state is (`state` may have gone on)
            if plan.write_base_cut is not None and point > 0 and (not lineage or point == first_lsn - 1):
                plan.write_base_cut(self.path, self.fs)  # the history on disk starts after it
            if first_commit:
                self._commit(first_commit, plan.first_commit_blobs)
        self._open_lsn = self._state.lsn
        if segment.file is not None and segment.file.path != segment.path:
            self._publish(segment)

    def _refuse_damaged_resume(self, plan: ResumePlan | None) -> None:
        """JournalCorrupt when the plan was restored past damage in a segment still here."""
        for name in plan.damaged_segments if plan is not None else ():
            if os.path.exists(os.path.join(self.path, name)):
                raise JournalCorrupt(f"{name}: the state to resume from was restored past damage in "
                                     "this segment (its state does not need the damaged frames, but "
                                     "the history here cannot be read through them)", segment=name)

    def _fold_on_disk(self, reader: Reader, lineage: list, first_lsn: int) -> tuple[State, int, dict]:
        """The state at the end of the history on disk (an open without `resume=`): the newest
        state checkpoint on the active history (`_checkpoint_state`) with the commits after it
        folded on, else the fold from LSN 1; noting whether it continues past the latest
        committed checkpoint (`_forgotten_resume`)."""
        state = self._checkpoint_state(reader, lineage, first_lsn)
        if state is None and first_lsn > 1:
            raise JournalError(
                f"journal {self.path}: the segments before LSN {first_lsn} were retired and no cut "
                f"under {layout.SNAPSHOTS_DIR}/ holds a usable state file at or after LSN "
                f"{first_lsn - 1}; open it with resume=replay.restore(path) so the state comes "
                "from a cut")
        state = state or State()
        start = state.lsn
        blobs, last_ownership_lsn = self._fold_tail(reader, state)
        if blobs is None:  # nothing after the checkpoint state: its segment's table
            blobs = self._history_end(reader, lineage)[1] if lineage else {}
        latest = state.latest_committed_checkpoint()
        begun = latest[1] if latest is not None else 0
        if last_ownership_lsn <= begun < start:  # the commits (begun, start] are in the state
            last_ownership_lsn = max((rec.commit.lsn for rec in reader.records(
                start_lsn=begun + 1, stop_lsn=start) if _holds_ownership(rec)), default=0)
        self._open_warning = self._forgotten_resume(state, last_ownership_lsn)
        return state, state.lsn, blobs

    @staticmethod
    def _fold_tail(reader: Reader, state: State) -> tuple[dict | None, int]:
        """Fold the commits after `state` onto it; (blob table of the last one's segment, None
        when there is none; LSN of the last commit holding an event other than a checkpoint
        marker, 0 when none). The first commit must continue `state`: its LSN, and its
        segment's chain seed when it is that segment's first commit."""
        blobs, last_ownership_lsn, first = None, 0, True
        for rec in reader.records(start_lsn=state.lsn + 1):
            if first and state.lsn > 0:
                _check_continues(reader, rec, state)
            first = False
            apply(state, rec.commit, chain=rec.chain, timeline=rec.timeline, blobs=rec.blobs)
            blobs = rec.blobs
            if _holds_ownership(rec):
                last_ownership_lsn = rec.commit.lsn
        return blobs, last_ownership_lsn

    def _checkpoint_state(self, reader: Reader, lineage: list, first_lsn: int) -> State | None:
        """The newest state checkpoint (a cut's state file, `journal.state_file`) that is a
        point of the active history, or None. A file that does not read, does not verify or is
        not on the history (another run, a dead branch, LSNs written again after a lost tail)
        is passed over for the next older one: never a wrong state."""
        if not lineage:
            return None
        for path in state_file.candidates(self.path):
            try:
                state, run_id = state_file.read(path)
            except (OSError, StateFileCorrupt):
                continue
            if run_id == reader.run_id and self._on_history(reader, lineage, first_lsn, state.lsn,
                                                            state.chain, state.timeline):
                return state
        return None

    @staticmethod
    def _on_history(reader: Reader, lineage: list, first_lsn: int, lsn: int, chain: int,
                    timeline: int | None = None) -> bool:
        """Whether (LSN `lsn`, `chain`, written by `timeline` unless None) is a point of the
        active history: its commit at `lsn` has that chain, or `lsn` is just before the first
        commit on disk and that segment's seed is `chain`. Reads the one segment holding it."""
        if lsn == first_lsn - 1:
            return lineage[0].segments[0].header.chain_seed == chain
        for rec in reader.records(start_lsn=lsn, stop_lsn=lsn):
            return rec.chain == chain and (timeline is None or rec.timeline == timeline)
        return False

    @staticmethod
    def _history_end(reader: Reader, lineage: list) -> tuple[int, dict]:
        """(LSN, blob table of its segment) of the last commit of the active history, reading
        only the last segments of its newest timeline (back to the first holding a commit)."""
        tip = lineage[-1]
        for seg in reversed(tip.segments):
            last, at = None, reader.position_in(seg)  # its commits after a cut's position will do
            for last in reader.records(start_lsn=at.lsn if at is not None else seg.first_lsn):
                pass
            if last is not None:
                return last.commit.lsn, last.blobs
        return tip.branch_lsn, {}

    def _check_resume_point(self, reader: Reader, lineage: list, first_lsn: int,
                            state: State) -> tuple[int, dict]:
        """(end LSN, blob table of its segment) of the history on disk; JournalError unless
        the resume point's anchor lies on it."""
        if not lineage:
            return state.lsn, {}
        end_lsn, end_blobs = self._history_end(reader, lineage)
        if state.lsn > end_lsn or not self._on_history(reader, lineage, first_lsn, state.lsn, state.chain):
            raise JournalError(
                f"resume point (LSN {state.lsn}, chain {state.chain:#010x}) is not on the active "
                f"history of journal {self.path} (LSNs {first_lsn}..{end_lsn}): the state comes "
                "from another run or branch")
        return end_lsn, end_blobs

    def _open_segment(self, reader: Reader, lineage: list, state: State, end_lsn: int,
                      end_blobs: dict, branching: bool) -> _SegmentPlan:
        """The segment commits go to next: a new branch's first segment (unpublished until its
        first commit is durable, see `_publish`), the last segment of the history, or the
        first segment of a new journal."""
        if branching:
            # the rest of the active history becomes a dead tail. The branch's parent is the
            # timeline of the lineage that holds commit state.lsn, which is not the newest one
            # when the resume point is before the newest branch point (restore(step=S) of an
            # older checkpoint): a child of the newest timeline would make readers follow the
            # old timeline past the resume point.
            parent = next((tl.timeline for tl in reversed(lineage) if tl.branch_lsn < state.lsn),
                          lineage[0].timeline) if lineage else 0
            self.timeline = max(max(reader.timelines) if lineage else state.timeline,
                                self._timeline_floor) + 1
            return self._create_segment(fmt.SegmentHeader(
                self.run_id, self.timeline, parent, state.lsn + 1, state.chain,
                fmt.group_mark(state.next_group_id)), publish=False, opening=True)
        if lineage:
            last = lineage[-1].segments[-1]
            f = self.fs.open_append(last.path)
            # `end_blobs` is the table of the segment holding the last commit; when the last
            # segment has no commit yet (crash right after a rotation) that is an earlier
            # segment, and claiming its blobs would leave the next `taken` without them
            stored = set(end_blobs) if end_lsn >= last.first_lsn else set()
            return _SegmentPlan(last.header, last.path, f.offset, stored, f)
        # a new history; a resume at LSN 0 from a replica's history starts above its timelines
        self.timeline = self._timeline_floor + 1
        return self._create_segment(fmt.SegmentHeader(self.run_id, self.timeline, 0, 1, 0,
                                                      fmt.group_mark(state.next_group_id)), opening=True)

    def _forgotten_resume(self, state: State, last_ownership_lsn: int) -> str | None:
        """The warning for an open without `resume=` that continues ownership history a restore
        would drop: a commit after the latest committed checkpoint's `checkpoint_begun` (LSN B, 0
        if none) holding an event that moves groups. Commits after B that hold only checkpoint
        markers (the `checkpoint_committed` of a clean shutdown) or an identity do not count."""
        latest = state.latest_committed_checkpoint()
        begun = latest[1] if latest is not None else 0
        if last_ownership_lsn <= begun:
            return None
        where = (f"the latest committed checkpoint (step {latest[0]}, checkpoint_begun at LSN "
                 f"{begun})" if latest is not None else "LSN 0 (no checkpoint was ever committed)")
        return (f"journal {self.path}: opened without resume=, but its history continues past {where} "
                f"with ownership events up to LSN {state.lsn} (the end); they are continued as they "
                "are. After a crash, restore first: state = replay.restore(path); "
                "Journal.open(path, resume=state)")

    def _repair_torn(self, reader: Reader) -> None:
        """Copy every torn tail aside into `torn/`, then cut it off (never acknowledged bytes):
        left in place, the writer would append after it and the next open would see a bad
        frame followed by good ones (JournalCorrupt). Cut off the zeros after the last frame of a
        preallocated segment too (a crash left them; they hold nothing, so nothing is copied):
        the segment is continued at its end, and zero-filled again as it grows."""
        for torn in reader.torn_tails():
            self._cut_torn(torn)
        for tail in reader.zero_tails.values():
            self._truncate_segment(tail.segment, tail.offset, "the zero-filled rest")

    def _cut_torn(self, torn) -> None:
        seg = torn.segment
        if seg.archived:
            return
        with open(seg.path, "rb") as f:
            f.seek(torn.offset)
            tail = f.read(torn.size - torn.offset)
        with _io_step("copy the torn tail aside into torn/ from", seg.path):
            leftovers.copy_torn_tail(self.fs, self.path, seg.name, torn.offset, tail)
        if torn.offset == 0:
            # a torn header keeps the segment out of the reader's lists: only the file goes
            with _io_step("remove the torn segment", seg.path):
                self.fs.unlink(seg.path)
                self.fs.fsync_dir(self.path)
        else:
            self._truncate_segment(seg, torn.offset, "the torn tail")

    def _truncate_segment(self, seg, offset: int, what: str) -> None:
        """Cut segment `seg` at `offset` (fsynced): `what` is what goes, for the error."""
        with _io_step(f"cut off {what} at offset {offset} of", seg.path):
            f = self.fs.open_append(seg.path)
            try:
                f.truncate(offset)
                f.sync()
            finally:
                f.close()
        seg.size = offset

    def _create_segment(self, header: fmt.SegmentHeader, *, publish: bool = True,
                        opening: bool = False) -> _SegmentPlan:
        """Create a segment holding `header`. `publish=False`: under a temporary name that no
        reader lists (`<name>.new`), to be renamed into place by `_publish`. `opening`: a
        failure removes the file again (after a failed commit nothing but closes may follow:
        the next open removes a segment whose header is torn)."""
        path = os.path.join(self.path, layout.segment_name(header.timeline, header.first_lsn))
        target = path if publish else path + layout.UNPUBLISHED_SUFFIX
        with _io_step("create the segment", target):
            if not publish and os.path.exists(target):  # a resume crashed before publishing it
                self.fs.unlink(target)
            f = self.fs.create(target)
            try:
                f.write(fmt.encode_header(header))
                f.sync()
                if publish:
                    self.fs.fsync_dir(self.path)
            except BaseException:
                f.close()
                if opening:
                    self._remove_unfinished(f.path)
                raise
        return _SegmentPlan(header, path, fmt.HEADER_SIZE, set(), f)

    def _remove_unfinished(self, path: str) -> None:
        """Remove a segment whose header did not become durable (best effort: if the removal
        fails too, the next open finds a torn header and removes it)."""
        try:
            self.fs.unlink(path)
            self.fs.fsync_dir(self.path)
        except OSError:
            pass

    def _publish(self, seg: _SegmentPlan) -> None:
        """Make a new branch's first segment visible: fsync it (whatever the sync mode), rename
        it to its segment name, fsync the directory.

        A resume is atomic this way. The branch's first commit re-marks the restored
        checkpoint as committed (its `checkpoint_committed` is on the dead tail); were the
        segment visible with only its header, a crash before that commit is durable would
        leave an active history on which the checkpoint is not committed, and the next
        restore would go back to an older checkpoint (or to nothing)."""
        with _io_step("publish the new branch's first segment", seg.path):
            seg.file.sync()
            self.fs.rename(seg.file.path, seg.path)
            seg.file.path = seg.path
            self.fs.fsync_dir(self.path)

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
        commit), and a failed write raises `JournalFailed` instead. (Waiting for a moment with
        no commit queued or in flight starved: under steady appends from several threads that
        moment almost never comes; a compaction waited 20 s.)"""
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

    def _refuse_begin(self, step: int, queued: list) -> None:
        """OwnershipError, nothing written, when the checkpoint protocol refuses a
        `checkpoint_begun(step)` after the `queued` events of its commit (`fold.begin_refused`;
        checkpoints begun after `_open_lsn` are this writer's). The journal's lock is held."""
        if not isinstance(step, int):
            return  # not a step at all: the schema's message names it
        why = begin_refused(self._state, step, begun_after=self._open_lsn, queued=queued)
        if why is not None:
            lsn = self._state.lsn + 1
            raise OwnershipError(f"{why} (journal {self.path}, commit LSN {lsn}; nothing was written)",
                                 lsn=lsn)

    # -- commit pipeline -------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise JournalFailed(f"journal {self.path} failed earlier ({self._failed!r}) and refuses "
                                "every call; reopen it to see what is on disk") from None
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")

    def _commit(self, events: list, blobs: dict[bytes, bytes] | None = None) -> int:
        self._lock.acquire()
        try:
            self._check_usable()
            pending = self._enqueue(events, blobs or {})
        except BaseException:
            self._lock.release()
            raise
        return self._await_commit(pending)

    def _enqueue(self, events: list, blobs: dict[bytes, bytes]) -> _Pending:
        state = self._state
        lsn = state.lsn + 1
        seg = self._segment
        # the digests of the loader-state blobs the commit references (only a taken() with
        # loader_state= brings blobs along)
        refs = [d for ev in events if type(ev) is Taken and ev.loader_state is not None
                for d in ev.loader_state.refs] if blobs else ()
        try:
            record = self._encode(lsn, events, refs, blobs, seg)
        except (TypeError, OverflowError) as exc:  # a value msgpack cannot hold
            raise self._bad_argument(lsn, events, exc) from None
        if seg.size + fmt.FRAME_HEADER_SIZE + 4 + len(record) > self.segment_bytes and seg.size > fmt.HEADER_SIZE:
            header = fmt.SegmentHeader(self.run_id, self.timeline, seg.header.parent_timeline, lsn,
                                       state.chain, fmt.group_mark(state.next_group_id))
            seg = _SegmentPlan(header, os.path.join(self.path, layout.segment_name(self.timeline, lsn)),
                               fmt.HEADER_SIZE, set())
            record = self._encode(lsn, events, refs, blobs, seg)
        # Encoding does not check field types; decoding does. Without this, admitted([1.0])
        # moved group 1 in memory and wrote a record every later open rejects (JournalCorrupt),
        # and step="3", target_step=None, reason=None, GroupRef(idx="7") ... did the same. The
        # fold then runs on the decoded commit: exactly what every reader will fold.
        try:
            commit = _commit_decoder.decode(record)
        except msgspec.ValidationError as exc:
            raise self._bad_argument(lsn, events, exc) from None
        prefixed = fmt.length_prefixed(record)
        chain = fmt.frame_chain(prefixed, state.chain)
        table = {d: blobs[d] for d in refs} if refs else None
        undo = apply(state, commit, chain=chain, timeline=self.timeline, blobs=table)
        seg.blobs.update(refs)
        seg.size += fmt.FRAME_HEADER_SIZE + len(prefixed)
        self._segment = seg
        p = _Pending(seg, prefixed, lsn, undo, chain)
        self._pending.append(p)
        return p

    def _bad_argument(self, lsn: int, events: list, exc: Exception) -> Exception:
        """The error for a commit whose events do not fit the schema, naming the argument."""
        found = arguments.explain(events)
        cls, what = (type(found), str(found)) if found is not None else (TypeError, f"{exc}")
        return cls(f"{what} (journal {self.path}, commit LSN {lsn}; nothing was written)")

    @staticmethod
    def _encode(lsn: int, events: list, refs: Sequence[bytes], blobs: dict[bytes, bytes], seg: _SegmentPlan) -> bytes:
        new = [Blob(d, blobs[d]) for d in dict.fromkeys(refs) if d not in seg.blobs] if refs else []
        return commit_encoder.encode(Commit(lsn, events, new))

    def _await_commit(self, mine: _Pending) -> int:
        """Return once commit `mine` is written (and fsynced under sync="always"), letting go
        of the journal lock the caller took once for it.

        While a batch is in flight the committer sleeps on a lock of its own, so a batch wakes
        its committers only, not every thread waiting on the journal; one woken because its
        commit is durable returns without taking the journal lock again. With no batch in
        flight, or handed the lead (`_pass_lead`), it leads (`_wait`)."""
        lock, held = self._lock, True
        try:
            while self._flushing and self._failed is None and self._durable_lsn < mine.lsn:
                waiter = _allocate_lock()
                waiter.acquire()
                mine.waiter = waiter
                saved = lock._release_save()  # fully, like Condition.wait
                held = False
                try:
                    waiter.acquire()
                except BaseException:  # interrupted: do not stay the one the lead is handed to
                    lock._acquire_restore(saved)
                    held = True
                    mine.waiter = None
                    if not self._flushing:
                        self._pass_lead()
                    raise
                if saved[0] == 1 and self._failed is None and self._durable_lsn >= mine.lsn:
                    return mine.lsn
                lock._acquire_restore(saved)
                held = True
            return self._wait(mine.lsn)
        finally:
            if held:
                lock.release()

    def _wait(self, lsn: int) -> int:
        """Return once commit `lsn` is written (and fsynced under sync="always"); lock held.

        With no batch in flight the caller leads: it writes every queued commit as one batch,
        then wakes that batch's committers and hands the lead to the oldest queued one."""
        while True:
            if self._failed is not None:
                self._check_usable()
            if self._durable_lsn >= lsn:
                return lsn
            if self._flushing:
                self._cond.wait()
                continue
            self._flushing = True
            batch, self._pending = self._pending, []
            self._cond.release()
            error = None
            try:
                self._write_batch(batch)
            except BaseException as exc:  # fail-stop on anything, including KeyboardInterrupt
                error = exc
            finally:
                self._cond.acquire()
            self._flushing = False
            if error is not None:
                self._fail(error, batch)
                raise JournalFailed(f"journal {self.path}: writing LSNs {batch[0].lsn}..{batch[-1].lsn} "
                                    f"failed: {error!r}; the journal now refuses every call") from error
            self._durable_lsn = batch[-1].lsn
            if self._replica is not None and self.sync == "always":
                self._note_durable()
            _wake(batch)
            self._pass_lead()

    def _pass_lead(self) -> None:
        """No batch in flight any more: wake the oldest queued committer (it leads the next
        batch) and every thread waiting on the condition."""
        for p in self._pending:
            if p.waiter is not None:
                _wake([p])
                break
        self._cond.notify_all()

    def _fail(self, error: BaseException, batch: list[_Pending]) -> None:
        self._failed = error
        _wake(batch)
        _wake(self._pending)
        self._cond.notify_all()
        for p in reversed(batch + self._pending):
            p.undo.revert(self._state)
        self._pending = []

    def _write_batch(self, batch: list[_Pending]) -> None:
        """Write queued commits as one frame per segment, rotating where the plan says, then fsync."""
        i, n = 0, len(batch)
        while i < n:
            seg = batch[i].segment
            j = n
            if batch[-1].segment is not seg:  # the batch goes on in a later segment
                j = i + 1
                while batch[j].segment is seg:
                    j += 1
            if seg is not self._disk_segment:
                self._rotate_to(seg)
            frame = fmt.frame_of_prefixed([p.prefixed for p in batch[i:j]], batch[j - 1].chain)
            if self._preallocate:
                self._zero_fill_ahead(seg.file, len(frame))
            seg.file.write(frame)
            i = j
        if self.sync == "always":
            self._disk_segment.file.sync()
        else:
            self._dirty = True
        if self._next is not None and 2 * self._disk_segment.file.offset >= self.segment_bytes:
            self._next.start()  # half full: the next segment is prepared meanwhile

    def _zero_fill_ahead(self, f, n: int) -> None:
        """Make sure the `n` bytes about to be written at `f.offset` land on allocated zeros:
        otherwise zero-fill the segment further (see PREALLOCATE_MIN) and fsync that, so the
        commits' fdatasyncs that follow write only their data."""
        need = f.offset + n
        if need <= f.allocated:
            return
        step = min(PREALLOCATE_MAX, max(PREALLOCATE_MIN, f.allocated))
        f.allocate(max(need, min(f.allocated + step, self.segment_bytes)))
        f.sync()

    @staticmethod
    def _cut_zeros(f) -> None:
        """Seal a preallocated segment: cut off its zeros (a sealed segment ends with its last
        frame) and fsync that. Readers take zeros at the end of a sealed segment for damage."""
        if f.allocated > f.offset:
            f.truncate(f.offset)
            f.sync()

    def _rotate_to(self, seg: _SegmentPlan) -> None:
        """Seal the segment on disk (fsync and cut off its zeros unless sync="none"), then
        create `seg`. The cut is durable before `seg` exists, so only the last segment of a
        timeline ever ends in zeros."""
        old = self._disk_segment
        if self.sync != "none":
            old.file.sync()
            self._cut_zeros(old.file)
            old.file.close()
        else:  # not fsynced now, but flush() must still make its commits durable
            self._sealed.append(old.file)
        prepared = self._next.take() if self._next is not None else None
        seg.file = (self._publish_prepared(prepared, seg) if prepared is not None
                    else self._create_segment(seg.header).file)
        self._disk_segment = seg

    def _publish_prepared(self, f, seg: _SegmentPlan):
        """Make the prepared, zero-filled file (journal/prealloc.py) segment `seg`: its header
        written over the first zeros and fsynced, then the file renamed into place and the
        directory fsynced. Until the rename is durable the file is a leftover the next open
        removes; after it, a segment with no frame yet."""
        try:
            with _io_step("publish the prepared next segment as", seg.path):
                f.write(fmt.encode_header(seg.header))
                f.sync()
                self.fs.rename(f.path, seg.path)
                f.path = seg.path
                self.fs.fsync_dir(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                f.close()
            raise
        return f

    # -- syncing and closing ---------------------------------------------------------------

    def _sync_loop(self) -> None:
        while not self._stop_syncer.wait(self.sync_interval):
            with self._cond:
                if self._closed or self._failed is not None:
                    return
            try:
                self.flush()
            except JournalError:
                return

    def flush(self) -> None:
        """Make every commit so far durable (fsync), whatever the sync mode; returns once it
        is. Raises `JournalFailed` when the fsync fails (the journal is then fail-stop) or
        failed earlier, `JournalClosed` after `close()`."""
        with self._cond:
            self._check_usable()
            while self._flushing:
                self._cond.wait()
            # re-check: the flush or batch we waited for may have failed (fail-stop: never
            # fsync again after a failed fsync and report success)
            self._check_usable()
            if self._pending:
                self._wait(self._pending[-1].lsn)
            if not self._dirty:
                return
            self._flushing = True
            self._cond.release()
            error = None
            try:
                for f in self._sealed:
                    f.sync()
                self._disk_segment.file.sync()
            except BaseException as exc:
                error = exc
            finally:
                self._cond.acquire()
                self._flushing = False
            if error is not None:
                self._fail(error, [])
                self._cond.notify_all()
                raise JournalFailed(f"journal {self.path}: fsync failed: {error!r}; the journal now "
                                    "refuses every call") from error
            self._dirty = False
            if self._replica is not None:
                self._note_durable()
            sealed, self._sealed = self._sealed, []
            for f in sealed:
                f.close()
            self._pass_lead()

    def _seal_active(self) -> None:
        """On a clean close, cut off the zeros ahead of the active segment's frames: closed, a
        journal's files hold frames only, as if never preallocated."""
        seg = self._disk_segment
        if self._preallocate and seg is not None and seg.file is not None and seg.file.fd >= 0:
            with self._cond, _io_step("cut off the zero-filled rest of", seg.file.path):
                self._cut_zeros(seg.file)

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
                self._seal_active()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._stop_syncer.set()
            if self._next is not None:  # after a failure no I/O but closes: the next open removes it
                self._next.close(remove=self._failed is None)
            seg = self._disk_segment
            files = list(self._sealed)
            if seg is not None and seg.file is not None:
                files.append(seg.file)
            for f in files:
                if f.fd >= 0:
                    try:
                        f.close()
                    except OSError:
                        pass
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


def _holds_ownership(rec) -> bool:
    """Whether a record's commit holds an event that moves groups (not a checkpoint marker nor
    an identity: those declare no `to` owner)."""
    return any(type(ev).to is not None for ev in rec.commit.events)


def _rewrites_tail(reader: Reader, state: State, first_commit: list) -> bool:
    """Whether the commits after `state` (what a branch at it would leave dead) hold nothing but
    the `checkpoint_committed` markers that `first_commit` (the resume's) would write again, and
    it nothing else: then they are folded onto `state`, whose history goes on at its end as if
    the resume had branched and written them (same state, same markers, no dead tail, no new
    segment). A restart of a run whose last commit marked its last checkpoint committed."""
    if any(type(ev) is not CheckpointCommitted for ev in first_commit):
        return False
    want = sorted(ev.step for ev in first_commit)
    tail, marks = [], []
    for rec in reader.records(start_lsn=state.lsn + 1):
        if any(type(ev) is not CheckpointCommitted for ev in rec.commit.events):
            return False
        marks += [ev.step for ev in rec.commit.events]
        if len(marks) > len(want):
            return False
        tail.append(rec)
    if sorted(marks) != want:
        return False
    for rec in tail:
        apply(state, rec.commit, chain=rec.chain, timeline=rec.timeline, blobs=rec.blobs)
    return True


def _check_continues(reader: Reader, rec, state: State) -> None:
    """JournalCorrupt unless `rec` is the commit after `state` on its history: LSN state.lsn + 1,
    and a segment seed equal to the state's chain when it opens its segment."""
    seg = next(s for s in reader.segments if s.name == rec.segment)
    if rec.commit.lsn != state.lsn + 1:
        raise JournalCorrupt(f"{seg.name}: the history after the state checkpoint at LSN {state.lsn} "
                             f"resumes at LSN {rec.commit.lsn} (a segment is missing)",
                             segment=seg.name, offset=rec.offset, lsn=state.lsn + 1)
    if rec.commit.lsn == seg.first_lsn and seg.header.chain_seed != state.chain:
        raise JournalCorrupt(f"{seg.name}: segment chain seed {seg.header.chain_seed:#010x} does not "
                             f"continue the chain {state.chain:#010x} at LSN {state.lsn}",
                             segment=seg.name, offset=0, lsn=rec.commit.lsn)


def _continue_elsewhere(path: str) -> str:
    """How to go on when the history on disk is damaged: `replay.rescue` continues the run in a
    fresh directory from the newest point whose state does not need the damaged frames."""
    return ("This history cannot be continued in place. To continue the run in a fresh directory "
            f"from the newest checkpoint the damage does not touch: `journal-inspect rescue "
            f"{shlex.quote(path)} NEWDIR` (or replay.rescue({path!r}, NEWDIR)), then "
            "state = replay.restore(NEWDIR); Journal.open(NEWDIR, resume=state). Keep this "
            "directory for forensics")


add_one_event_calls(Journal)
