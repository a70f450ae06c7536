"""The next segment, prepared in the background ahead of need (like etcd's file pipeline).

A writer whose active segment is half full asks for the next one (`NextSegment.start`): a
thread creates `layout.PREPARED_NAME` in the journal directory, preallocates and zero-fills it
to the segment size and fsyncs it. The rotation then takes it (`take`), writes the segment
header over its first zeros, fsyncs it, renames it to the segment's name and fsyncs the
directory (which makes the name durable: the thread need not fsync the directory): no create,
no zero-fill and no extent allocation in the commit path.

The prepared file holds no frame until it is renamed, so whatever a crash leaves of it is
garbage: the next open removes it (`remove_leftover`), and so does a clean close. A preparation
that fails is removed and forgotten; the rotation then creates the segment itself, and a disk
that is really failing fails that (nothing acknowledged depends on a prepared file). The
thread touches no file but the prepared one, so a journal that failed (fail-stop) issues no
I/O on its history even while a preparation finishes.
"""

from __future__ import annotations

import os
import threading

from .layout import PREPARED_NAME
from .vfs import File, OsFileSystem


def remove_leftover(fs: OsFileSystem, journal_path: str) -> None:
    """Remove a prepared file a crash or a failed preparation left (the writer lock is held)."""
    path = os.path.join(journal_path, PREPARED_NAME)
    if os.path.lexists(path):
        fs.unlink(path)
        fs.fsync_dir(journal_path)


class NextSegment:
    """At most one prepared segment file of `size` bytes in `journal_path`, made by a thread."""

    def __init__(self, fs: OsFileSystem, journal_path: str, size: int):
        self.fs, self.journal_path, self.size = fs, journal_path, size
        self.path = os.path.join(journal_path, PREPARED_NAME)
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
                remove_leftover(self.fs, self.journal_path)
        except OSError:
            pass

    def _prepare(self) -> None:
        f = ready = None
        try:
            self._unlink()  # one a failed preparation could not remove
            f = self.fs.create(self.path)
            f.allocate(self.size)
            f.sync()
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
