"""What `journal-inspect` reads: a journal directory or a cut directory, opened read-only.

`open_source` checks the path, opens a `journal.Reader` in the mode asked
(the reader takes no lock and never writes) and lists segment sizes for the
progress bars. `user_error` turns the exceptions a user can cause (a missing
path, a damaged journal read in strict mode, a bad cut) into `InspectError`
with the exit code: 2 for a usage error or an unreadable path, 1 when the
journal itself has a problem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import journal
from journal import Reader
from snapshot import RestoreError

from ..cut_status import is_cut, is_journal
from ..inspection import Record, tracked
from .progress import Progress

USAGE = 2
PROBLEMS = 1
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


class InspectError(Exception):
    """A user-facing failure: one line on stderr and an exit code, never a traceback."""

    def __init__(self, message: str, code: int = USAGE):
        super().__init__(message)
        self.code = code


@dataclass
class Source:
    path: str                      # absolute
    kind: str                      # "journal" or "cut"
    mode: str
    reader: Reader | None = None
    sizes: dict[str, int] = field(default_factory=dict)  # segment file name -> bytes on disk

    def scan(self, label: str, records: Iterable[Record], total: int) -> Iterator[Record]:
        """`records` with a progress bar labelled `label` over `total` bytes (closed at the end)."""
        bar = Progress(label, total)
        try:
            yield from tracked(records, bar, self.sizes)
        finally:
            bar.close()


def open_source(path: str, mode: str = "strict", *, allow_cut: bool = True) -> Source:
    """Open `path` (journal or cut directory) read-only; raises `InspectError` when it cannot."""
    full = os.path.abspath(path)
    if not os.path.exists(full):
        raise InspectError(f"{path}: no such file or directory")
    if not os.path.isdir(full):
        raise InspectError(f"{path}: not a directory (give a journal directory or a cut directory)")
    if not os.access(full, os.R_OK | os.X_OK):
        raise InspectError(f"{path}: permission denied")
    if is_cut(full):
        if not allow_cut:
            raise InspectError(f"{path} is a cut directory; this command needs a journal directory")
        return Source(full, "cut", mode)
    try:
        journal_dir = is_journal(full)
    except OSError as exc:
        raise InspectError(f"{path}: cannot list: {exc.strerror or exc}") from None
    if not journal_dir:
        raise InspectError(f"{path}: not a journal directory (no segment files *.wal or *.wal.zst, "
                           "no snapshots/)")
    try:
        reader = Reader(full, mode)
    except BaseException as exc:
        err = user_error(exc)
        if err is None:
            raise
        raise err from None
    return Source(full, "journal", mode, reader, {s.name: s.size for s in reader.segments})


def user_error(exc: BaseException) -> InspectError | None:
    """The `InspectError` for an exception a user can cause; None for a bug (let it show)."""
    if isinstance(exc, InspectError):
        return exc
    if isinstance(exc, BrokenPipeError):  # the reader of our output went away: not an error
        return None
    if isinstance(exc, journal.JournalCorrupt):
        where = ", ".join(p for p in (
            exc.segment and f"segment {exc.segment}",
            exc.offset is not None and f"offset {exc.offset}",
            exc.lsn is not None and f"LSN {exc.lsn}") if p)
        msg = str(exc)
        if where and not (exc.segment and exc.segment in msg):
            msg += f" ({where})"
        return InspectError(f"journal damaged: {msg}; rerun with --mode point_in_time (stop at the "
                            "damage) or --mode salvage (read around it)", PROBLEMS)
    if isinstance(exc, journal.OwnershipError):
        return InspectError(f"the journal breaks the ownership rules: {exc}", PROBLEMS)
    if isinstance(exc, RestoreError):
        return InspectError(f"{type(exc).__name__}: {exc}", PROBLEMS)
    if isinstance(exc, journal.LoaderStateError):
        return InspectError(f"loader state does not decode: {exc}", PROBLEMS)
    if isinstance(exc, FileNotFoundError):
        return InspectError(f"{exc.filename or exc}: disappeared during the scan (a compaction "
                            "archived or removed it?); run the command again")
    if isinstance(exc, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return InspectError(f"{exc.filename or ''}: {exc.strerror or exc}")
    if isinstance(exc, OSError) and exc.errno is not None:
        return InspectError(f"{exc.filename or ''}: {exc.strerror or exc}")
    return None
