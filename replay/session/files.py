"""`durable_file`: write a file so that after a crash it is either absent or complete."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
from typing import BinaryIO, Iterator

from journal.vfs import DEFAULT_FS, FileStream, FileSystem


@contextlib.contextmanager
def durable_file(path: str, *, fs: FileSystem = DEFAULT_FS) -> Iterator[BinaryIO]:
    """`with durable_file(path) as f: torch.save(state, f)`: the bytes go to a temporary file
    beside `path` (its missing directories made durably), which is fsynced, renamed over `path`
    and its directory fsynced when the block ends without an exception (else removed, and the
    exception propagates: an OS error of the write as it is). Use it for what
    `Session.checkpoint`'s `save` writes: the checkpoint is committed only once `save()`
    returned. `f` is a buffered binary stream without a file descriptor: every write goes
    through `fs`, the journal's I/O seam (`journal.vfs`)."""
    directory = os.path.dirname(os.path.abspath(path))
    fs.makedirs(directory)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{secrets.token_hex(4)}")
    with fs.durable_file(path, via=tmp) as file, io.BufferedWriter(FileStream(file)) as stream:
        yield stream   # closing the stream flushes it before the file is fsynced
