"""Operating-system errors of compaction and retention, as `journal.JournalIOError`.

Every file operation a compaction or retention makes runs inside `io_step`:
an `OSError` (disk full, EIO, permissions) becomes a `JournalIOError` naming
the file and the operation. The caller's own cleanup (a temporary cut
directory, a temporary archive) has run by then, so nothing half-written is
left that any reader would take for a cut or a segment.
"""

from __future__ import annotations

import os

from journal.vfs import OsFileSystem
from journal.errors import io_step as _io_step

_THEN = "compact again (the journal and its previous cuts are intact)"


def io_step(operation: str, path: str):
    """Run one step (`operation`, e.g. "write the cut", on `path`), its OS errors wrapped by
    `journal.errors.io_step`."""
    return _io_step(operation, path, then=_THEN)


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
