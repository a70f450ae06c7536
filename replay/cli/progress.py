"""Progress bars on stderr for long scans (tqdm): only when stderr is a terminal, only after a
second, one bar per pass with its own label, rate and ETA.

    bar = Progress("audit: active history", total_bytes)   # a `replay.inspection.Bar`
    for rec in tracked(reader.records(), bar, sizes):
        ...
    bar.close()

A bar counts segment bytes (an archived segment counts its compressed size), so
it moves at the pace the scan reads, and shows the commits passed on so far.
`JOURNAL_INSPECT_PROGRESS_DELAY` (seconds, default 1) changes the delay before a
bar appears (tests set 0). A closed bar is erased: what stays on the terminal
is the command's output.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

DELAY_ENV = "JOURNAL_INSPECT_PROGRESS_DELAY"


def _delay() -> float:
    try:
        return float(os.environ.get(DELAY_ENV, "1"))
    except ValueError:
        return 1.0


_SIZE = (100, 20)  # columns, rows when the terminal does not say (a pty never sized says 0, 0)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _size(stream: TextIO) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return _SIZE
    return size.columns or _SIZE[0], size.lines or _SIZE[1]


class Progress:
    """One bar for one pass of a scan; does nothing unless `stream` is a terminal."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None):
        stream = stream if stream is not None else sys.stderr
        self.delay = _delay()
        self.start = time.monotonic()
        self.total = max(total, 1)
        self.commits = 0
        self.bar = None  # no terminal, no bar: tqdm is imported only to draw one
        if _is_terminal(stream):
            from tqdm import tqdm
            cols, rows = _size(stream)
            self.bar = tqdm(total=self.total, desc=label, unit="B", unit_scale=True, unit_divisor=1024,
                            file=stream, delay=self.delay, leave=False, mininterval=0.1, ncols=cols,
                            nrows=rows)

    def advance(self, nbytes: int, commits: int) -> None:
        if self.bar is None:
            return
        self.commits += commits
        self.bar.set_postfix_str(f"{self.commits:,} commits", refresh=False)
        self.bar.update(max(min(nbytes, self.total - self.bar.n), 0))

    def close(self) -> None:
        if self.bar is None:
            return
        if time.monotonic() - self.start >= self.delay:
            self.bar.refresh()  # the final counts, once, before the bar is erased
        self.bar.close()


def erase_line(stream: TextIO | None = None) -> None:
    """Clear the terminal line a bar may still occupy (an interrupt can stop a scan before its
    bar is closed), so that a message written next starts on a clean line."""
    stream = stream if stream is not None else sys.stderr
    if _is_terminal(stream):
        stream.write("\r\x1b[K")
