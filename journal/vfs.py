"""The I/O seam: every write, fsync, preallocation, rename, unlink, truncate, mkdir and
directory fsync the journal, the compactor and the library's durable files (`durable_file`:
`replay.durable_file`, a checkpoint folder's seal) issue goes through a `FileSystem`.

Production uses `OsFileSystem`. Tests substitute a subclass that records each
operation, fails the N-th one (EIO, ENOSPC), writes short, or keeps only what
was fsynced to simulate a crash. Reads do not go through the seam: after a
simulated crash the tests materialise the surviving bytes on disk and the
ordinary reader opens them.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
from typing import Iterator

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

    @contextlib.contextmanager
    def durable_file(self, path: str, *, via: str | None = None, sync_dir: bool = True) -> Iterator[File]:
        """The one durable write: the block writes the `File` yielded; when it ends the file is
        fsynced and closed, renamed over `path` if it was written under the temporary name `via`,
        and `path`'s directory fsynced (`sync_dir`: False where the caller fsyncs a directory
        once for many files, as a cut does). Durable once the block returned.

        With `via` (beside `path`; a leftover of it is removed first), a crash leaves `path` as
        it was or whole, and a failure (the block's or a step's) removes `via` (best effort)
        before the error propagates. Without it `path` is written in place and must not exist:
        whole only once the block returned, so a caller that needs it whole or absent writes it
        in a directory renamed into place complete (a cut) or removes it on failure."""
        if via is not None and os.path.lexists(via):
            self.unlink(via)
        f = self.create(via or path)
        try:
            try:
                yield f
                f.sync()
            finally:
                f.close()
            if via is not None:
                self.rename(via, path)
        except BaseException:
            if via is not None:
                with contextlib.suppress(OSError):
                    self.unlink(via)
            raise
        if sync_dir:
            self.fsync_dir(os.path.dirname(path) or ".")

    def write_file(self, path: str, data: bytes) -> None:
        """Create `path` with `data`, fsync it and its directory."""
        with self.durable_file(path) as f:
            f.write(data)

    def replace_file(self, path: str, data: bytes) -> None:
        """Atomically replace `path` with `data` (via `<path>.tmp`: fsync, rename, directory fsync)."""
        with self.durable_file(path, via=path + REPLACE_TMP_SUFFIX) as f:
            f.write(data)

    def fsync_file(self, path: str) -> None:
        """fsync a file written without the seam (by a framework, a data plane)."""
        f = self.open_append(path)
        try:
            f.sync()
        finally:
            f.close()

    def makedirs(self, path: str) -> None:
        """Create `path` and missing parents, fsyncing each parent after each create."""
        path = os.path.abspath(path)
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        self.makedirs(parent)
        self.mkdir(path)
        self.fsync_dir(parent)


class FileStream(io.RawIOBase):
    """A `File` as a Python binary stream (`write`, `seek`, `tell`), for code that writes into a
    file object (`torch.save(state, f)`). It has no descriptor (`fileno` raises), so every byte
    goes through the seam; closing it leaves the `File` open to its `durable_file`."""

    def __init__(self, file: File):
        super().__init__()
        self.file = file

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.file.write(view)
        return len(view)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        position = {os.SEEK_SET: 0, os.SEEK_CUR: self.file.offset, os.SEEK_END: self.file.allocated}[whence] + offset
        if position < 0:
            raise ValueError(f"seek to {position} in {self.file.path}: before the file's start")
        self.file.offset = position
        return position

    def tell(self) -> int:
        return self.file.offset


FileSystem = OsFileSystem
DEFAULT_FS = OsFileSystem()
