"""The two locks of a journal directory, both `flock`s, released when their descriptor closes.

* The **writer lock** on `LOCK`: one writing process (`JournalLocked` for a second one).
* The **compaction lock** on the journal directory itself: held by every `snapshot.compact`
  (in any process, also a `BackgroundCompactor` thread of the writer) for its whole run, and
  tried by the writer's open before it removes what a crashed compaction left (temporary
  cuts, archives being written, a segment beside its archive). While a compaction runs, its
  temporary files are not garbage, so the open leaves them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator

from . import layout
from .errors import JournalIOError, JournalLocked
from .vfs import OsFileSystem

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _exclusive_now(fd: int) -> bool:
    """Take an exclusive flock on `fd` without waiting; False (and `fd` closed) if it is held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    return True


def _directory_fd(path: str) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)


def acquire_writer_lock(path: str, fs: OsFileSystem) -> int:
    """The descriptor holding `<path>/LOCK` exclusively; JournalLocked if another process has it."""
    lock_path = os.path.join(path, layout.LOCK_NAME)
    try:
        if not os.path.exists(lock_path):
            try:
                fs.write_file(lock_path, b"")
            except FileExistsError:
                pass
        fd = os.open(lock_path, os.O_RDWR | _CLOEXEC)
    except OSError as exc:
        raise JournalIOError.from_os_error(exc, "create and open the writer lock", lock_path) from exc
    if not _exclusive_now(fd):
        raise JournalLocked(f"journal {path!r} is open for writing by another process "
                            f"(lock held on {lock_path})")
    return fd


def try_compaction_lock(path: str) -> int | None:
    """The descriptor holding the compaction lock of journal `path`, None while a compaction
    holds it."""
    try:
        fd = _directory_fd(path)
    except OSError as exc:
        raise JournalIOError.from_os_error(exc, "open the journal directory to lock it", path) from exc
    return fd if _exclusive_now(fd) else None


@contextlib.contextmanager
def compaction_lock(path: str) -> Iterator[None]:
    """Hold the compaction lock of journal `path` (waiting for another compaction, or for a
    writer's open cleaning up, to finish). A missing directory needs no lock: the caller then
    reports it."""
    try:
        fd = _directory_fd(path)
    except FileNotFoundError:
        yield
        return
    except OSError as exc:
        raise JournalIOError.from_os_error(exc, "open the journal directory to lock it", path) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
