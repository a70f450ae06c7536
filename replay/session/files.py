"""`durable_file`: write a file so that after a crash it is either absent or complete."""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import BinaryIO, Iterator

from journal.vfs import DEFAULT_FS


@contextlib.contextmanager
def durable_file(path: str) -> Iterator[BinaryIO]:
    """`with durable_file(path) as f: torch.save(state, f)`: the bytes go to a temporary file
    beside `path`, which is fsynced, renamed over `path` and its directory fsynced when the
    block ends without an exception (else removed). Use it for what `Session.checkpoint`'s
    `save` writes: the checkpoint is committed only once `save()` returned."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    DEFAULT_FS.fsync_dir(directory)
