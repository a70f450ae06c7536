"""Operating-system errors of compaction and retention, as `journal.JournalIOError`.

Every file operation a compaction or retention makes runs inside `io_step`:
an `OSError` (disk full, EIO, permissions) becomes a `JournalIOError` naming
the file and the operation. The caller's own cleanup (a temporary cut
directory, a temporary archive) has run by then, so nothing half-written is
left that any reader would take for a cut or a segment.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from journal import JournalIOError, OsFileSystem


@contextlib.contextmanager
def io_step(operation: str, path: str) -> Iterator[None]:
    """Run one step (`operation`, e.g. "write the cut", on `path`), wrapping its OS errors."""
    try:
        yield
    except JournalIOError:
        raise
    except OSError as exc:
        detail = exc.strerror or str(exc)
        if isinstance(exc.filename, str) and exc.filename != path:
            detail = f"{exc.filename}: {detail}"
        raise JournalIOError(
            f"{path}: cannot {operation} ({detail}); nothing half-written was left behind and "
            "the journal and its previous cuts are intact: free space or fix permissions, then "
            "compact again", path=path, operation=operation, errno=exc.errno) from exc


def remove_quietly(fs: OsFileSystem, path: str) -> None:
    """Remove what a failed step left under a temporary name (a directory or a file). Should
    that fail too, the temporary name is one no reader opens, and the next compaction removes
    it."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            fs.rmtree(path)
        elif os.path.lexists(path):
            fs.unlink(path)
    except OSError:
        pass
