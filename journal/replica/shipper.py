"""Shipping a journal to object storage (docs/object-storage.md): the `ReplicaLink` a writer
opened with `Journal.open(path, replica=URL, ...)` holds.

It takes the writer's lease in the bucket (`lease.py`), then one background thread (the shipper)
uploads what is durable on disk:

* every sealed segment, whole (`names.sealed_object_name`), after which the local marker
  `replica/<segment>.shipped` tells retention it may retire the segment;
* the durable tail of the active segment, as immutable pieces named by byte offset and LSN
  range (`names.piece_name`), at most `ship_interval` seconds after a commit is durable;
* every cut in `<journal>/snapshots/`, its MANIFEST.json last (the cut's commit marker).

Objects are immutable. Names carry the first 16 hex digits of the bytes' sha256, so an
identical re-upload has the same name (`put(mode="create")` answering "exists" counts as
done) and other bytes for the same segment or offset have another name, which the inventory
(one LIST when the replica opens, then the shipper's own uploads) shows as a conflict: shipping
stops and `ReplicaConflict` is reported. Cut files have plain names: an existing one is read
back and compared.

A store that cannot compare-and-swap (`Bucket.supports_cas`) is refused before any request.
Before every pass that uploads, the shipper checks (HEAD) that the lease's ETag is still its
own: a writer that lost the lease uploads nothing more and the journal fails (`JournalFailed`).
An idle journal makes no LIST and no GET: only the lease renewals. Compaction's retention
decision is carried out in the bucket by the same thread (`apply_retention`, `retention.py`).

Every request is retried with backoff (`retry.py`) while the store is unreachable or failing,
without end while the journal runs (it keeps committing locally meanwhile and `lag()` grows),
for a while when the replica opens or closes or retention deletes.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .. import layout
from ..errors import JournalError, JournalIOError, JournalLocked
from ..reader import Reader, Segment, list_segments, read_segment_bytes
from ..vfs import OsFileSystem
from . import names, retry
from .errors import LeaseLost, ReplicaConflict, ReplicaError, ReplicaTimeout
from .lease import LEASE_SECONDS, Lease
from .link import ReplicaLag, ReplicaLink
from .retention import RetentionDecision, RetentionRequest, retention_request
from .store import Location

CLOSE_SECONDS = 5.0         # how long close() keeps trying to ship the rest
RETENTION_SECONDS = 5.0     # how long a retention pass retries one request before it leaves the rest
OPEN_SECONDS = 30.0         # how long open keeps trying to list the bucket and take the lease
VANISHED_PASSES = 3         # passes in a row that may find a local file gone before shipping stops


class Inventory:
    """What the bucket holds, as far as this writer knows: the objects listed when the replica
    opened, plus its own uploads. Keys: ("sealed", tl, first) and ("piece", tl, first, offset)."""

    def __init__(self, listed: dict[str, int]):
        self.by_key: dict[tuple, names.ReplicaObject] = {}
        self.cut_files: set[str] = set()
        self.sizes = dict(listed)
        for name in listed:
            obj = names.parse_replica_object(name)
            if obj is not None:
                self.add(obj)

    @staticmethod
    def key(obj: names.ReplicaObject) -> tuple:
        if obj.kind == "sealed":
            return ("sealed", obj.timeline, obj.seg_first_lsn)
        return ("piece", obj.timeline, obj.seg_first_lsn, obj.offset)

    def add(self, obj: names.ReplicaObject) -> None:
        if obj.kind == "cut":
            self.cut_files.add(obj.name)
        else:
            self.by_key[self.key(obj)] = obj

    def remove(self, name: str) -> None:
        """Forget object `name` (deleted by retention)."""
        self.sizes.pop(name, None)
        self.cut_files.discard(name)
        obj = names.parse_replica_object(name)
        if obj is not None and obj.kind != "cut" and self.by_key.get(self.key(obj)) == obj:
            del self.by_key[self.key(obj)]

    def max_timeline(self) -> int:
        return max((k[1] for k in self.by_key), default=0)

    def has_history(self) -> bool:
        return bool(self.by_key)

    def shipped_pieces(self, timeline: int, first_lsn: int) -> list[names.ReplicaObject]:
        """The contiguous pieces of a segment from offset 0."""
        out, offset = [], 0
        while (obj := self.by_key.get(("piece", timeline, first_lsn, offset))) is not None:
            out.append(obj)
            offset += self.sizes[obj.name]
        return out


class Shipper:
    """A journal's replica (`ReplicaLink`): the lease, the inventory and the shipper thread."""

    def __init__(self, replica: Any, options: dict | None, *, journal_path: str, fs: OsFileSystem,
                 ship_interval: float, on_lost: Callable[[BaseException], None]):
        if not ship_interval > 0:
            raise ValueError(f"ship_interval must be a number of seconds > 0, not {ship_interval!r}")
        location = Location.of(replica, options)
        self.where = location.where
        self.bucket = location.open()
        if not self.bucket.supports_cas:
            raise ReplicaError(
                f"replica {self.where}: this store cannot replace {names.LEASE_NAME} only while its "
                "ETag is unchanged (compare-and-swap), which the writer's lease needs; use an "
                "s3://, gs:// or az:// URL")
        self.path, self.fs, self.ship_interval, self._on_lost = journal_path, fs, ship_interval, on_lost
        self._cv = threading.Condition()
        self._note: tuple[int, str, int] | None = None   # (durable LSN, its segment, end offset)
        self._unshipped_since: float | None = None       # when the oldest unshipped note came
        self._shipped_lsn = 0
        self._error: str | None = None
        self._retention: RetentionRequest | None = None   # deletions not done yet
        self._retention_error: str | None = None          # why the last retention pass stopped
        self._stopped: BaseException | None = None       # conflict or lost lease: no more shipping
        self._closing = False
        self._deadline: float | None = None               # close(): give up retrying after it
        self._requested = self._completed = 0             # flush generations
        self._last_pass = 0.0
        self._vanished = 0  # passes in a row that found a local file gone (`VANISHED_PASSES`)
        self._cuts_seen: tuple = ()
        self._sealed_done: set[tuple[int, int]] = set()
        self._active: tuple[int, int, int, int] | None = None  # (tl, first, shipped offset, lsn)
        self._thread: threading.Thread | None = None
        self.inventory = Inventory(self._on_open(self.bucket.list, "list the bucket"))
        self.lease = Lease(self.bucket)

    # -- called by the writer ---------------------------------------------------------------

    def acquire(self, *, resuming: bool) -> int:
        """`ReplicaLink.acquire`. The lease reserves a timeline above every one in the bucket, on
        disk and reserved by the previous holder (`Lease.reserved`)."""
        on_disk = list_segments(self.path)
        floor = max(self.inventory.max_timeline(), max((s.timeline for s in on_disk), default=0))
        self._on_open(lambda: self.lease.acquire(takeover=resuming, floor=floor), "take the lease")
        if not on_disk and not resuming and self.inventory.has_history():
            raise JournalError(
                f"replica {self.where} already holds a journal history (up to timeline "
                f"{self.inventory.max_timeline()}) and {self.path} holds none: to continue it "
                "after losing the node, state = replay.restore(URL, replica_options=...); "
                "Journal.open(path, resume=state, replica=URL); to start a new run, use another URL")
        status = os.path.join(self.path, layout.REPLICA_DIR)
        try:
            self.fs.makedirs(status)  # from now on retention retires shipped segments only
        except OSError as exc:
            raise JournalIOError.from_os_error(exc, "create the replica status directory", status) from exc
        return self.lease.reserved - 1

    def _on_open(self, fn: Callable[[], Any], what: str):
        """`fn()` retried for at most OPEN_SECONDS: an open fails rather than hang on a store
        that cannot be reached."""
        self._deadline = time.monotonic() + OPEN_SECONDS
        try:
            return self._retrying(fn, what)
        except retry.GaveUp as exc:
            raise ReplicaError(f"replica {self.where}: could not {what} within {OPEN_SECONDS:.0f} s "
                               f"({exc}); check the URL, the options and that the store is reachable, "
                               "then open again") from exc
        finally:
            self._deadline = None

    def note_durable(self, lsn: int, segment_path: str, end_offset: int) -> None:
        """`ReplicaLink.note_durable`."""
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-shipper", daemon=True)
                self._thread.start()
            if self._note is not None and self._note[0] == lsn:
                return
            had_news = self._has_news()
            self._note = (lsn, segment_path, end_offset)
            if self._unshipped_since is None and lsn > self._shipped_lsn:
                self._unshipped_since = time.monotonic()
            # the shipper waits for news, or, with news, until its pass is due: only the first
            # news since its last pass changes what it waits for, so only that wakes it (the
            # writer calls this once per commit)
            if not had_news:
                self._cv.notify_all()

    def lag(self) -> ReplicaLag:
        with self._cv:
            durable = self._note[0] if self._note is not None else 0
            since = self._unshipped_since
            error = str(self._stopped) if self._stopped is not None else self._error or self._retention_error
            return ReplicaLag(time.monotonic() - since if since is not None else 0.0,
                              max(0, durable - self._shipped_lsn), self._shipped_lsn, error,
                              dict(self.bucket.requests))

    def apply_retention(self, decision: RetentionDecision) -> RetentionRequest:
        """`ReplicaLink.apply_retention`. The deletions are computed from what the bucket holds
        as far as this writer knows (the open's LIST, its own uploads, less its own deletions:
        no request); the request replaces one not carried out yet."""
        known = set(self.inventory.sizes) | set(self.inventory.cut_files)
        request = retention_request(decision, known, self.path, _cuts_on_disk(self.path))
        with self._cv:
            self._retention, self._retention_error = request, None
            self._cv.notify_all()
        return request

    def flush(self, timeout: float | None) -> None:
        """Wait until everything durable now (and every cut on disk now) is in the bucket, and
        a retention request whose cuts are then in the bucket is carried out (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            self._requested += 1
            wanted = self._requested
            self._cv.notify_all()
            while self._completed < wanted and self._stopped is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ReplicaTimeout(
                        f"replica {self.where}: not everything acknowledged was shipped within "
                        f"{timeout} s (shipped through LSN {self._shipped_lsn}, last error: "
                        f"{self._error or 'none'}); the journal keeps it locally and goes on shipping")
                self._cv.wait(left)
            if self._stopped is not None:
                raise self._stopped

    def close(self, *, release: bool) -> None:
        """Ship what is left (trying for at most CLOSE_SECONDS), stop the thread, and give the
        lease up (`release`) so the next writer need not wait for it to expire."""
        with self._cv:
            self._closing = True
            self._deadline = time.monotonic() + CLOSE_SECONDS
            self._requested += 1
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(CLOSE_SECONDS + 1)
        if release and self._stopped is None and self.lease.e_tag is not None:
            try:
                self.lease.renew(released=True)
            except Exception:  # the lease then expires on its own
                pass

    # -- the shipper thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped is not None:
                        self._cv.notify_all()
                        return
                    wanted = self._requested
                    now = time.monotonic()
                    due = self._last_pass + self.ship_interval
                    if wanted > self._completed or self._closing:
                        break
                    if self._has_news() and now >= due:
                        break
                    if self.lease.renew_due() or self._retention_ready() and self._retention_error is None:
                        break
                    renew_in = self.lease.renewed + LEASE_SECONDS / 3 - now
                    self._cv.wait(max(min(due - now if self._has_news() else self.ship_interval,
                                          renew_in), 0.0))
                    if not self._has_news() and self._cuts_changed():
                        self._last_pass = 0.0
                        self._requested += 1
                closing = self._closing
            try:
                if self.lease.renew_due():
                    self._retrying(self.lease.renew, "renew the lease")
                if self._has_news() or wanted > self._completed:
                    self._last_pass = time.monotonic()
                    self._ship_pass()
                if self._retention_ready():
                    self._retention_pass()
                with self._cv:
                    self._completed = max(self._completed, wanted)
                    self._vanished = 0
                    self._cv.notify_all()
            except (ReplicaConflict, LeaseLost) as exc:
                self._stop(exc)
                return
            except retry.GaveUp:
                return
            except FileNotFoundError as exc:
                if not self._passed_over_vanished(exc):
                    return
                continue
            except Exception as exc:  # reading the local files failed: nothing more can be shipped
                self._stop(ReplicaError(f"replica {self.where}: shipping from {self.path} stopped: "
                                        f"{type(exc).__name__}: {exc}"))
                return
            if closing:
                return

    def _passed_over_vanished(self, exc: FileNotFoundError) -> bool:
        """A local file went while a pass read it: retention retired it (a compaction beside the
        writer), and the next pass, at once, lists the directory again. Shipping stops (False)
        when the journal directory itself is gone or files keep going for VANISHED_PASSES
        passes in a row."""
        self._vanished += 1
        if os.path.isdir(self.path) and self._vanished < VANISHED_PASSES:
            self._last_pass = 0.0
            return True
        self._stop(ReplicaError(f"replica {self.where}: shipping from {self.path} stopped: "
                                f"{exc.filename or self.path} is gone ({self._vanished} passes in a "
                                "row found a local file gone; is the journal directory still there?)"))
        return False

    def _has_news(self) -> bool:
        return self._note is not None and self._note[0] > self._shipped_lsn

    def _cuts_changed(self) -> bool:
        return _cuts_on_disk(self.path) != self._cuts_seen

    def _stop(self, exc: BaseException) -> None:
        if isinstance(exc, LeaseLost):  # the journal fails before any flush hears of it
            self._on_lost(exc)
        with self._cv:
            self._stopped = exc
            self._cv.notify_all()

    def _retrying(self, fn: Callable[[], Any], what: str, deadline: float | None = None):
        """`fn()` under the retry policy, `lag().error` naming the last failure until a request
        succeeds. Every failure of the store is retried; our own verdicts (a conflict, a lost or
        held lease, a local file gone) are final. Past the deadline that open and close set, or
        `deadline`, it gives up (`retry.GaveUp`)."""
        def noted(exc: BaseException) -> None:
            self._error = f"{what}: {type(exc).__name__}: {exc}"

        out = retry.retrying(
            fn, what, final=(ReplicaError, JournalLocked, _LocalFileGone), on_failure=noted,
            deadline=lambda: min((d for d in (self._deadline, deadline) if d is not None), default=None))
        self._error = None
        return out

    def _ship_pass(self) -> None:
        with self._cv:
            note = self._note
        if note is not None:
            self._retrying(self.lease.check, "check the lease")
            # cuts the bucket's history reaches, and a resume's base cut (the history on disk
            # starts after it), before the segments that continue from them
            local = list_segments(self.path)
            self._ship_cuts(max(self._shipped_lsn, local[0].first_lsn - 1 if local else 0))
            lsn, active_path, end = note
            tl, first, _ = layout.parse_segment_name(os.path.basename(active_path))
            self._ship_sealed((tl, first))
            self._ship_active(tl, first, active_path, end, lsn)
        self._ship_cuts(None)
        if note is not None:
            with self._cv:
                self._shipped_lsn = max(self._shipped_lsn, note[0])
                if self._note[0] <= self._shipped_lsn:
                    self._unshipped_since = None
                else:  # commits came during the pass: their age counts from now at the latest
                    self._unshipped_since = time.monotonic()

    def _retention_ready(self) -> bool:
        request = self._retention
        return request is not None and self._shipped_lsn >= request.needs_lsn and all(
            names.cut_object_name(c, layout.MANIFEST_NAME) in self.inventory.cut_files
            for c in request.needs_cuts)

    def _retention_pass(self) -> None:
        """Carry out the retention request: the lease checked (a writer that lost it deletes
        nothing), then each deletion in order, each request retried for at most
        RETENTION_SECONDS. One that keeps failing leaves it and the rest for the next pass and
        is reported (`lag().error`); the journal and the shipping go on."""
        request = self._retention
        done = 0
        try:
            self._retrying(self.lease.check, "retention: check the lease",
                           time.monotonic() + RETENTION_SECONDS)
            for name in request.deletions:
                self._retrying(lambda: self.bucket.delete(name), f"retention: delete {name}",
                               time.monotonic() + RETENTION_SECONDS)
                self.inventory.remove(name)
                done += 1
        except retry.GaveUp as exc:
            with self._cv:
                if self._retention is request:
                    self._retention = request._replace(deletions=request.deletions[done:])
                    self._retention_error = f"{exc} (retried on the next pass)"
            self._error = None
            return
        with self._cv:
            if self._retention is request:
                self._retention, self._retention_error = None, None

    def _upload(self, obj: names.ReplicaObject, data) -> None:
        """Upload an immutable segment object unless the bucket already has it; a different
        object under the same key is a conflict."""
        key = Inventory.key(obj)
        known = self.inventory.by_key.get(key)
        if known is not None and known.name != obj.name:
            raise self._conflict(known.name, f"this journal ships {obj.name}, other bytes for "
                                 f"the same {obj.kind} of timeline {obj.timeline}, LSN {obj.from_lsn}")
        if known is None:
            self._retrying(lambda: self.bucket.create(obj.name, data), f"upload {obj.name}")
            self.inventory.sizes[obj.name] = len(data)
            self.inventory.add(obj)

    def _conflict(self, name: str, detail: str) -> ReplicaConflict:
        return ReplicaConflict(
            f"replica {self.where}: object {name} is in the bucket, but {detail} (journal "
            f"{self.path}): shipping stopped. The bucket holds another history here: use another "
            "replica URL, or restore from the bucket and resume", object=name)

    def _ship_sealed(self, active: tuple[int, int]) -> None:
        segs = [s for s in list_segments(self.path) if (s.timeline, s.first_lsn) < active]
        mark = f"{self.where}\n".encode()
        for i, seg in enumerate(segs):
            key = (seg.timeline, seg.first_lsn)
            marker = os.path.join(self.path, layout.shipped_marker_name(*key))
            if key in self._sealed_done or _holds(marker, mark):
                self._sealed_done.add(key)
                continue
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            if nxt is not None and nxt.timeline == seg.timeline:
                last = nxt.first_lsn - 1
            elif seg.timeline == active[0]:
                last = active[1] - 1
            else:
                last = _last_lsn(self.path, seg)
            data = read_segment_bytes(seg)
            name = names.sealed_object_name(seg.timeline, seg.first_lsn, last, sha256_hex(data))
            self._upload(names.parse_replica_object(name), data)
            self.fs.replace_file(marker, mark)
            self._sealed_done.add(key)

    def _ship_active(self, tl: int, first: int, path: str, end: int, lsn: int) -> None:
        if self._active is None or self._active[:2] != (tl, first):
            self._active = (tl, first, *self._adopt_pieces(tl, first, path))
        _, _, offset, shipped = self._active
        if end <= offset or lsn <= shipped:
            return
        with open(path, "rb") as f:
            data = os.pread(f.fileno(), end - offset, offset)
        name = names.piece_name(tl, first, offset, shipped + 1, lsn, sha256_hex(data))
        self._upload(names.parse_replica_object(name), data)
        self._active = (tl, first, offset + len(data), lsn)

    def _adopt_pieces(self, tl: int, first: int, path: str) -> tuple[int, int]:
        """(end offset, last LSN) of what the bucket holds of the active segment, once its bytes
        are checked to be the local ones (else another history wrote there: a conflict)."""
        offset, lsn = 0, first - 1
        with open(path, "rb") as f:
            for piece in self.inventory.shipped_pieces(tl, first):
                size = self.inventory.sizes[piece.name]
                if not sha256_hex(os.pread(f.fileno(), size, offset)).startswith(piece.sha):
                    raise self._conflict(piece.name, f"bytes {offset}..{offset + size} of {path} "
                                         "are other bytes for the same piece")
                offset, lsn = offset + size, piece.to_lsn
        return offset, lsn

    def _ship_cuts(self, upto: int | None) -> None:
        """Ship the cuts on disk not in the bucket yet (those at or before LSN `upto`)."""
        cuts = _cuts_on_disk(self.path)
        for cut in cuts:
            manifest = names.cut_object_name(cut, layout.MANIFEST_NAME)
            if manifest in self.inventory.cut_files or upto is not None and \
                    layout.parse_cut_dir_name(cut)[1] > upto:
                continue
            root = os.path.join(self.path, layout.SNAPSHOTS_DIR, cut)
            files = []
            for base, _, files_here in os.walk(root):
                for n in files_here:
                    files.append(os.path.relpath(os.path.join(base, n), root).replace(os.sep, "/"))
            for rel in sorted(files, key=lambda r: r == layout.MANIFEST_NAME):  # manifest last
                self._upload_cut_file(names.cut_object_name(cut, rel), os.path.join(root, rel))
        if upto is None:
            self._cuts_seen = cuts

    def _upload_cut_file(self, name: str, local: str) -> None:
        if name in self.inventory.cut_files:
            return

        def upload() -> bool:
            if not os.path.exists(local):  # retention removed the cut: not the store's failure
                raise _LocalFileGone(2, "No such file or directory", local)
            return self.bucket.create(name, Path(local))

        created = self._retrying(upload, f"upload {name}")
        if not created:
            with open(local, "rb") as f:
                mine = f.read()
            theirs = self._retrying(lambda: self.bucket.get(name), f"read back {name}")
            if theirs != mine:
                raise ReplicaConflict(f"replica {self.where}: cut file {name} in the bucket differs "
                                      f"from {local}: shipping stopped", object=name)
        self.inventory.cut_files.add(name)


def open_replica(replica: Any, options: dict | None, *, journal_path: str, fs: OsFileSystem,
                 ship_interval: float, on_lost: Callable[[BaseException], None]) -> ReplicaLink:
    """The replica of the journal at `journal_path`: `replica` (a `Location`, or a URL or an
    obstore store with `options` the keyword arguments of `obstore.store.from_url`) opened and
    listed, its lease not taken yet. `on_lost(exc)` is called when another writer takes the
    lease."""
    return Shipper(replica, options, journal_path=journal_path, fs=fs, ship_interval=ship_interval,
                   on_lost=on_lost)


def _cuts_on_disk(journal_path: str) -> tuple[str, ...]:
    """The names of the cut directories in `<journal>/snapshots/`, sorted."""
    return tuple(sorted(os.path.basename(path) for _lsn, _tl, path in layout.cut_dirs(journal_path)))


def sha256_hex(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _holds(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except FileNotFoundError:
        return False


class _LocalFileGone(FileNotFoundError):
    """A local file an upload was to read is gone (a cut retention removed meanwhile): the pass
    ends, and the next one lists the directory again (`Shipper._passed_over_vanished`)."""


def _last_lsn(journal_path: str, seg: Segment) -> int:
    """The LSN of the last commit in `seg` (the last segment of a timeline that is not active)."""
    last = seg.first_lsn - 1
    reader = Reader(journal_path, "strict")
    match = next(s for s in reader.segments if (s.timeline, s.first_lsn) == (seg.timeline, seg.first_lsn))
    for rec in reader.segment_records(match, last=True):
        last = rec.commit.lsn
    return last

