"""The packs one `LocalDataPlane` appends to, one at a time, and how anyone tells whether a pack
still has a writer.

A writer is one data-plane object in one process, with a random id. It creates a pack under a
temporary name, takes an exclusive `flock` on it, writes the magic, renames it to its pack
name and fsyncs the directory, all before the first record goes in: a pack's name never
appears without its writer's lock, and its name is durable before any put in it returns. The
lock is held until the writer retires the pack (it holds `PACK_BYTES`, it is mostly dead, a
write failed, `close`, or the process died), after which no byte of it ever changes: it is
*settled*, and may be read to its end, compacted and removed by anyone. A pack retired in
order ends with its seal (`pack_format.py`). Records are appended
whole; a write or fsync that fails retires the pack (cut back to where the failed batch began,
where the disk allows) and the next write starts a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading

from journal.vfs import File, OsFileSystem
from snapshot.errors import DataPlaneError, DataPlaneIOError

from .pack_format import MAGIC, pack_name, seal_record

PACK_BYTES = 32 << 20    # a pack is retired once it holds this many bytes
TMP_PREFIX = ".tmp-"     # a pack being created; a crash can leave one, no locator names it
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

# Packs this process's writers append to. flock already keeps two writers of one process
# apart on a local file system; on NFS it is emulated with POSIX locks, which do not.
_ACTIVE: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


def settled(path: str) -> bool:
    """Whether no writer appends to the pack at `path` any more (its bytes never change again).
    False where the file system cannot tell (no flock): such a pack is never removed."""
    with _ACTIVE_LOCK:
        if path in _ACTIVE:
            return False
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


class PackWriter:
    """The active pack of one writer. Not thread-safe: the group commit runs one batch at a time."""

    def __init__(self, root: str, fs: OsFileSystem):
        self.root, self.fs = root, fs
        self._start_writer()

    def _start_writer(self) -> None:
        self.writer = secrets.token_hex(8)
        self.pid = os.getpid()
        self.file: File | None = None
        self.name: str | None = None
        self._sequence = 0

    def owns(self, name: str) -> bool:
        """Whether `name` is one of this writer's packs."""
        return name.startswith(self.writer + "-")

    def append(self, data: bytes, sync: bool) -> tuple[str, int]:
        """Write `data` (whole records) at the end of the active pack, a new one first when there
        is none or it holds PACK_BYTES, and fsync it when `sync`: (pack name, offset of data).
        `DataPlaneIOError` names the pack and the step that failed."""
        if self.pid != os.getpid():   # a forked child: its parent's pack is not its own
            if self.file is not None:   # (closing the child's copy keeps the parent's lock)
                os.close(self.file.fd)
            self._start_writer()
        if self.file is not None and self.file.offset >= PACK_BYTES:
            self.retire(seal=True)
        if self.file is None:
            self._create()
        f, name = self.file, self.name
        start = f.offset
        step = "write"
        try:
            f.write(data)
            if sync:
                step = "fsync"
                f.sync()
        except BaseException as exc:
            self._abandon(start)
            if isinstance(exc, OSError):
                raise self._error(exc, f"{step} {len(data)} bytes of records at offset {start} of "
                                  f"pack {name}") from exc
            raise
        return name, start

    def _create(self) -> None:
        name = pack_name(self.writer, self._sequence)
        self._sequence += 1
        final, tmp = os.path.join(self.root, name), os.path.join(self.root, TMP_PREFIX + name)
        try:
            f = self.fs.create(tmp)
        except OSError as exc:
            raise self._error(exc, f"create pack {TMP_PREFIX + name}") from exc
        with _ACTIVE_LOCK:
            _ACTIVE.add(final)
        step = "lock"
        try:
            _lock(f)
            step = "write the magic of"
            f.write(MAGIC)
            step = "rename into place"
            self.fs.rename(tmp, final)
            f.path = final
            self.file, self.name = f, name
            step = "fsync the directory after creating"
            self.fs.fsync_dir(self.root)
        except BaseException as exc:
            if self.file is f:   # renamed: a settled pack of no record, reclaimed as such
                self.retire(seal=False)
            else:
                with contextlib.suppress(OSError):
                    f.close()
                with contextlib.suppress(OSError):
                    self.fs.unlink(tmp)
                with _ACTIVE_LOCK:
                    _ACTIVE.discard(final)
            if isinstance(exc, OSError):
                raise self._error(exc, f"{step} pack {name}") from exc
            raise

    def retire(self, seal: bool) -> None:
        """Stop appending to the active pack and let go of its lock: it is settled from now on.
        With `seal` (every row in it was fsynced: no batch failed in it, none is in flight) its
        seal goes last, fsynced, so readers hash no body of it; a seal that fails to write
        only leaves the pack to be read in full."""
        f, self.file = self.file, None
        if f is None:
            return
        if seal:
            with contextlib.suppress(OSError):
                f.write(seal_record(self.name, f.offset))
                f.sync()
        with _ACTIVE_LOCK:
            _ACTIVE.discard(f.path)
        self.name = None
        # every record it holds that anyone was told about was fsynced: closing adds nothing
        with contextlib.suppress(OSError):
            f.close()

    def _abandon(self, start: int) -> None:
        """After a failed step: cut the records of the failed batch off where the disk allows
        (else a reader finds them whole or torn, never acknowledged), and retire the pack."""
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.truncate(start)
        self.retire(seal=False)

    def _error(self, exc: OSError, what: str) -> DataPlaneIOError:
        return DataPlaneIOError(exc.errno, f"data plane {self.root}: could not {what}: {exc}; the "
                                "rows of this write are not stored; retry once the disk is healthy")


def _lock(f: File) -> None:
    try:
        fcntl.flock(f.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        raise DataPlaneError(
            f"{f.path}: cannot flock a new pack ({exc}); LocalDataPlane needs flock to keep the "
            "writers of a shared directory apart (use a local or NFS directory, or "
            "ObjectStoreDataPlane)") from exc
