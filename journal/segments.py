"""The writer's segment files: one policy (size, rotation, preparing the next one, zero-fill) and
the files it governs (`SegmentFiles`).

A commit goes to the active segment unless its frame would take the segment past `size`
(`SegmentPolicy.overflows`); then the next segment starts at the commit's LSN. Under sync
"always" and "batch" every segment is zero-filled ahead of its frames, so a frame overwrites
allocated zeros and its fdatasync writes no metadata. There is one way to do that,
`_preallocate` (allocate zeros, fsync), used at two paces:

* the active segment grows ahead of its frames, from its size at least PREALLOCATE_MIN bytes,
  doubling, at most PREALLOCATE_MAX at a time, never past `size` (`SegmentPolicy.fill_target`);
* once the active segment is half full, a thread prepares the next segment at its full size
  under `layout.PREPARED_NAME` (`NextSegment`, like etcd's file pipeline); the rotation writes
  the segment header over its first zeros, fsyncs it, renames it into place and fsyncs the
  directory: no create, no zero-fill and no extent allocation in the commit path.

A sealed segment ends with its last frame (its zeros cut off and fsynced before the next
segment exists), so only the last segment of a timeline ever ends in zeros; a clean close cuts
them off the active one too. The prepared file holds no frame until it is renamed, so whatever
a crash leaves of it is garbage: the next open removes it (`remove_prepared`), and so does a
clean close. A preparation that fails is removed and forgotten; the rotation then creates the
segment itself (nothing acknowledged depends on a prepared file). The preparing thread touches
no file but the prepared one, so a journal that failed (fail-stop) issues no I/O on its history
even while a preparation finishes.
"""

from __future__ import annotations

import contextlib
import os
import threading

from . import format as fmt
from . import layout
from .errors import io_step
from .vfs import File, OsFileSystem

DEFAULT_SEGMENT_BYTES = 64 << 20
MIN_SEGMENT_BYTES = 4096
PREALLOCATE_MIN = 64 << 10
PREALLOCATE_MAX = 4 << 20


class SegmentPolicy:
    """How big a segment grows and how far ahead of its frames it is zero-filled."""

    __slots__ = ("size", "preallocate")

    def __init__(self, size: int, sync: str):
        if size < MIN_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be at least {MIN_SEGMENT_BYTES}, not {size}")
        self.size = size
        self.preallocate = sync != "none"  # without fsyncs there is no metadata write to save

    def overflows(self, planned: int, record_len: int) -> bool:
        """Whether a commit of `record_len` encoded bytes goes to a new segment, the active one
        holding `planned` bytes (a segment holds at least one commit, however big)."""
        return planned + fmt.FRAME_HEADER_SIZE + 4 + record_len > self.size and planned > fmt.HEADER_SIZE

    def half_full(self, offset: int) -> bool:
        """Whether the next segment is prepared now (the active one is `offset` bytes long)."""
        return self.preallocate and 2 * offset >= self.size

    def fill_target(self, allocated: int, need: int) -> int | None:
        """The size to zero-fill the active segment to before `need` bytes are written, or None
        when they land on allocated zeros already (see the module docstring)."""
        if need <= allocated:
            return None
        step = min(PREALLOCATE_MAX, max(PREALLOCATE_MIN, allocated))
        return max(need, min(allocated + step, self.size))


def _preallocate(f: File, size: int) -> None:
    """Zero-fill `f` up to `size` bytes and fsync that."""
    f.allocate(size)
    f.sync()


def cut_zeros(f: File) -> None:
    """Cut off the zeros after a preallocated segment's last frame and fsync that (readers take
    zeros at the end of a sealed segment for damage)."""
    if f.allocated > f.offset:
        f.truncate(f.offset)
        f.sync()


class SegmentPlan:
    """A segment as the committers see it: where commits are headed, before any byte is written."""

    __slots__ = ("header", "path", "size", "blobs", "file")

    def __init__(self, header: fmt.SegmentHeader, path: str, size: int, blobs: set[bytes], file=None):
        self.header = header
        self.path = path
        self.size = size      # bytes planned into it (written or queued)
        self.blobs = blobs    # blob digests stored in it (written or queued)
        self.file = file      # open File once it exists on disk


def remove_prepared(fs: OsFileSystem, journal_path: str) -> None:
    """Remove a prepared file a crash or a failed preparation left (the writer lock is held)."""
    path = os.path.join(journal_path, layout.PREPARED_NAME)
    if os.path.lexists(path):
        fs.unlink(path)
        fs.fsync_dir(journal_path)


class NextSegment:
    """At most one prepared segment file of `size` bytes in `journal_path`, made by a thread."""

    def __init__(self, fs: OsFileSystem, journal_path: str, size: int):
        self.fs, self.journal_path, self.size = fs, journal_path, size
        self.path = os.path.join(journal_path, layout.PREPARED_NAME)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready: File | None = None
        self._failed = False  # the last preparation failed: not again before the next `take`

    def start(self) -> None:
        """Prepare the next segment file unless one is prepared or being prepared, or the last
        preparation failed (one attempt per segment, not a thread per commit on a failing disk)."""
        with self._lock:
            if self._thread is not None or self._ready is not None or self._failed:
                return
            self._thread = threading.Thread(target=self._prepare, name="journal-prealloc", daemon=True)
            self._thread.start()

    def take(self) -> File | None:
        """The prepared file (waiting for a preparation under way), or None: none was asked for,
        or it failed. The caller owns the file from here on."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            ready, self._ready, self._failed = self._ready, None, False
            return ready

    def close(self, *, remove: bool) -> None:
        """Wait for a preparation under way and close the prepared file; `remove` it too (a
        clean close; best effort: the next open removes what is left)."""
        f = self.take()
        if f is None:
            return
        try:
            f.close()
            if remove:
                remove_prepared(self.fs, self.journal_path)
        except OSError:
            pass

    def _prepare(self) -> None:
        f = ready = None
        try:
            self._unlink()  # one a failed preparation could not remove
            f = self.fs.create(self.path)
            _preallocate(f, self.size)
            ready = f
        except OSError:
            pass  # see the module docstring: the rotation creates the segment itself
        finally:
            if ready is None:
                self._discard(f)
            with self._lock:
                self._ready, self._thread, self._failed = ready, None, ready is None

    def _discard(self, f: File | None) -> None:
        """Remove a preparation that failed (best effort, like `close`)."""
        try:
            if f is not None:
                f.close()
            self._unlink()
        except OSError:
            pass

    def _unlink(self) -> None:
        """Remove the prepared file if there is one (not made durable: an open removes it too)."""
        if os.path.lexists(self.path):
            self.fs.unlink(self.path)


class SegmentFiles:
    """The writer's segment files on disk: the active one, the sealed ones not fsynced yet
    (sync "none"), the prepared next one. Called with the journal's lock held, or by the one
    thread leading a batch."""

    def __init__(self, fs: OsFileSystem, path: str, policy: SegmentPolicy, sync: str):
        self.fs, self.path, self.policy, self.sync = fs, path, policy, sync
        self.active: SegmentPlan | None = None
        self.sealed: list[File] = []  # sync="none": sealed segments not fsynced yet (flush() does it)
        self.next = NextSegment(fs, path, policy.size) if policy.preallocate else None

    def plan_next(self, run_id: bytes, timeline: int, parent: SegmentPlan, lsn: int, chain: int,
                  next_group_id: int) -> SegmentPlan:
        """The segment a rotation before commit `lsn` opens (nothing on disk yet)."""
        header = fmt.SegmentHeader(run_id, timeline, parent.header.parent_timeline, lsn, chain,
                                   fmt.group_mark(next_group_id))
        return SegmentPlan(header, os.path.join(self.path, layout.segment_name(timeline, lsn)),
                           fmt.HEADER_SIZE, set())

    def write_frame(self, seg: SegmentPlan, frame: bytes) -> int:
        """Write `frame` at the end of `seg`, rotating to it first when it is not the active one;
        the offset it starts at."""
        if seg is not self.active:
            self._rotate_to(seg)
        f = seg.file
        if self.policy.preallocate:
            target = self.policy.fill_target(f.allocated, f.offset + len(frame))
            if target is not None:
                _preallocate(f, target)
        at = f.offset
        f.write(frame)
        return at

    def batch_written(self) -> None:
        """After a batch's frames: fsync them under sync="always"; prepare the next segment once
        the active one is half full."""
        if self.sync == "always":
            self.active.file.sync()
        if self.next is not None and self.policy.half_full(self.active.file.offset):
            self.next.start()

    def sync_all(self) -> None:
        """fsync the sealed segments not fsynced yet and the active one."""
        for f in self.sealed:
            f.sync()
        self.active.file.sync()

    def close_sealed(self) -> None:
        """Close the sealed segments once `sync_all` made them durable."""
        sealed, self.sealed = self.sealed, []
        for f in sealed:
            f.close()

    def _rotate_to(self, seg: SegmentPlan) -> None:
        """Seal the active segment (fsync and cut off its zeros unless sync="none"), then create
        `seg`. The cut is durable before `seg` exists, so only the last segment of a timeline
        ever ends in zeros."""
        old = self.active
        if self.sync != "none":
            old.file.sync()
            cut_zeros(old.file)
            old.file.close()
        else:  # not fsynced now, but flush() must still make its commits durable
            self.sealed.append(old.file)
        prepared = self.next.take() if self.next is not None else None
        seg.file = (self._publish_prepared(prepared, seg) if prepared is not None
                    else self.create(seg.header).file)
        self.active = seg

    def _publish_prepared(self, f: File, seg: SegmentPlan) -> File:
        """Make the prepared, zero-filled file segment `seg`: its header written over the first
        zeros and fsynced, then the file renamed into place and the directory fsynced. Until the
        rename is durable the file is a leftover the next open removes; after it, a segment
        with no frame yet."""
        try:
            with io_step("publish the prepared next segment as", seg.path):
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

    def create(self, header: fmt.SegmentHeader, *, publish: bool = True,
               opening: bool = False) -> SegmentPlan:
        """Create a segment holding `header`. `publish=False`: under a temporary name that no
        reader lists (`<name>.new`), to be renamed into place by `publish`. `opening`: a
        failure removes the file again (after a failed commit nothing but closes may follow:
        the next open removes a segment whose header is torn)."""
        path = os.path.join(self.path, layout.segment_name(header.timeline, header.first_lsn))
        target = path if publish else path + layout.UNPUBLISHED_SUFFIX
        with io_step("create the segment", target):
            f = self.fs.create(target)  # an unpublished one a resume left is gone (`leftovers`)
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
        return SegmentPlan(header, path, fmt.HEADER_SIZE, set(), f)

    def _remove_unfinished(self, path: str) -> None:
        """Remove a segment whose header did not become durable (best effort: if the removal
        fails too, the next open finds a torn header and removes it)."""
        try:
            self.fs.unlink(path)
            self.fs.fsync_dir(self.path)
        except OSError:
            pass

    def publish(self, seg: SegmentPlan) -> None:
        """Make a new branch's first segment visible: fsync it (whatever the sync mode), rename
        it to its segment name, fsync the directory.

        A resume is atomic this way. The branch's first commit re-marks the restored
        checkpoint as committed (its `checkpoint_committed` is on the dead tail); were the
        segment visible with only its header, a crash before that commit is durable would
        leave an active history on which the checkpoint is not committed, and the next
        restore would go back to an older checkpoint (or to nothing)."""
        with io_step("publish the new branch's first segment", seg.path):
            seg.file.sync()
            self.fs.rename(seg.file.path, seg.path)
            seg.file.path = seg.path
            self.fs.fsync_dir(self.path)

    def seal_active(self) -> None:
        """On a clean close, cut off the zeros ahead of the active segment's frames: closed, a
        journal's files hold frames only, as if never preallocated."""
        seg = self.active
        if self.policy.preallocate and seg is not None and seg.file is not None and seg.file.fd >= 0:
            with io_step("cut off the zero-filled rest of", seg.file.path):
                cut_zeros(seg.file)

    def close(self, *, failed: bool) -> None:
        """Close every file (best effort); the prepared next one is removed unless the journal
        `failed` (then no I/O but closes: the next open removes it)."""
        if self.next is not None:
            self.next.close(remove=not failed)
        files = list(self.sealed)
        if self.active is not None and self.active.file is not None:
            files.append(self.active.file)
        for f in files:
            if f.fd >= 0:
                with contextlib.suppress(OSError):
                    f.close()
