"""`scratch_dir`: a fresh directory on tmpfs (/dev/shm) when there is one, removed afterwards.

The torn-tail, bit-flip, crash-image and property tests open journals hundreds of times and
simulate their crashes by editing files, so real-disk fsync latency would only make them
slow. Tests that need a real file system (the SIGKILL crash loop, the lock) use `tmp_path`."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

SHM = "/dev/shm"


@contextmanager
def scratch_dir(prefix: str = "oj-test-", fallback: Path | None = None) -> Iterator[Path]:
    """Without a writable tmpfs: `fallback` as it is (its owner removes it), or a new directory
    in the system temp directory, removed afterwards."""
    base = SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None
    if base is None and fallback is not None:
        yield fallback
        return
    d = tempfile.mkdtemp(prefix=prefix, dir=base)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
