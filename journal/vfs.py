"""The I/O seam: every write, fsync, preallocation, rename, unlink, truncate, mkdir and
directory fsync the journal and the compactor issue goes through a `FileSystem`.

Production uses `OsFileSystem`. Tests substitute a subclass that records each
operation, fails the N-th one (EIO, ENOSPC), writes short, or keeps only what
was fsynced to simulate a crash. Reads do not go through the seam: after a
simulated crash the tests materialise the surviving bytes on disk and the
ordinary reader opens them.
"""

from __future__ import annotations

import errno
import os
import shutil

from .layout import REPLACE_TMP_SUFFIX

ZERO_FILL_CHUNK = 1 << 20  # bytes of zeros per write while preallocating
# posix_fallocate errors that mean "this file system cannot reserve space", not "no space"
_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


class File:
    """A file open for writing through a `FileSystem`."""

    def __init__(self, fs: "FileSystem", path: str, fd: int, offset: int):
        self.fs = fs
        self.path = path
        self.fd = fd
        self.offset = offset  # where the next write lands
        self.allocated = offset  # bytes 0..allocated exist on disk (past `offset`: zeros)

    def write(self, data: bytes) -> None:
        """Write all of `data` at the current offset, or raise."""
        self.fs.write(self, data)

    def sync(self) -> None:
        self.fs.fsync(self)

    def truncate(self, size: int) -> None:
        self.fs.truncate(self, size)

    def allocate(self, size: int) -> None:
        """Make the file `size` bytes long, the bytes past `allocated` zeros on disk."""
        self.fs.allocate(self, size)

    def close(self) -> None:
        if self.fd >= 0:
            self.fs.close(self)


class OsFileSystem:
    """The real file system. Subclasses override single operations to inject faults."""

    def create(self, path: str) -> File:
        """Create a new file (it must not exist) for writing."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        return File(self, path, fd, 0)

    def open_append(self, path: str) -> File:
        """Open an existing file for writing at its end."""
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        return File(self, path, fd, os.lseek(fd, 0, os.SEEK_END))

    def write(self, f: File, data: bytes) -> None:
        n = os.pwrite(f.fd, data, f.offset)
        f.offset += n
        if n < len(data):  # a short write: the rest, until all of it is written
            self._write_rest(f, memoryview(data)[n:])
        f.allocated = max(f.allocated, f.offset)

    @staticmethod
    def _write_rest(f: File, view: memoryview) -> None:
        while view:
            n = os.pwrite(f.fd, view, f.offset)
            f.offset += n
            view = view[n:]

    def fsync(self, f: File) -> None:
        """Make `f`'s data durable, and the metadata needed to read it back (its size): not its
        timestamps, whose update on every overwrite would cost a file-system journal commit
        per fsync of a preallocated segment."""
        _fdatasync(f.fd)

    def truncate(self, f: File, size: int) -> None:
        os.ftruncate(f.fd, size)
        f.offset = min(f.offset, size)
        f.allocated = min(f.allocated, size)

    def allocate(self, f: File, size: int) -> None:
        """Preallocate `f` from `f.allocated` up to `size` bytes: reserve the blocks
        (posix_fallocate, where the file system can) and write zeros over them, so that a write
        into the range later changes no metadata (file size, unwritten-extent state) and the
        fdatasync after it writes only data. Not fsynced: the caller fsyncs."""
        start = f.allocated
        if size <= start:
            return
        try:
            os.posix_fallocate(f.fd, start, size - start)
        except OSError as exc:
            if exc.errno not in _NO_FALLOCATE:
                raise
        zeros = memoryview(bytes(min(ZERO_FILL_CHUNK, size - start)))
        pos = start
        while pos < size:
            pos += os.pwrite(f.fd, zeros[:size - pos], pos)
        f.allocated = size

    def close(self, f: File) -> None:
        fd, f.fd = f.fd, -1
        os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # Composite operations, built from the primitives above so faults reach them too.

    def write_file(self, path: str, data: bytes) -> None:
        """Create `path` with `data`, fsync it and its directory."""
        f = self.create(path)
        try:
            f.write(data)
            f.sync()
        finally:
            f.close()
        self.fsync_dir(os.path.dirname(path) or ".")

    def replace_file(self, path: str, data: bytes) -> None:
        """Atomically replace `path` with `data` (temporary file, fsync, rename, directory fsync)."""
        tmp = path + REPLACE_TMP_SUFFIX
        if os.path.exists(tmp):
            self.unlink(tmp)
        f = self.create(tmp)
        try:
            f.write(data)
            f.sync()
        finally:
            f.close()
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def makedirs(self, path: str) -> None:
        """Create `path` and missing parents, fsyncing each parent after each create."""
        path = os.path.abspath(path)
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        self.makedirs(parent)
        self.mkdir(path)
        self.fsync_dir(parent)


FileSystem = OsFileSystem
DEFAULT_FS = OsFileSystem()
