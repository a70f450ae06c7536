"""A progress bar on stderr for long scans: only when stderr is a terminal, only after a second.

    bar = Progress("verify", total_bytes)
    for rec in bar.records(reader.records(), sizes):   # sizes: segment name -> bytes
        ...
    bar.close()

Progress is counted in segment bytes (an archived segment counts its compressed
size), so it moves at the pace the scan reads. `JOURNAL_INSPECT_PROGRESS_DELAY`
(seconds, default 1) changes the delay before the bar appears (tests set 0).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable, Iterator, Mapping, TextIO

DELAY_ENV = "JOURNAL_INSPECT_PROGRESS_DELAY"
_WIDTH = 30
_INTERVAL = 0.1  # seconds between redraws


def _delay() -> float:
    try:
        return float(os.environ.get(DELAY_ENV, "1"))
    except ValueError:
        return 1.0


class Progress:
    """One bar for one scan; a no-op unless `stream` is a terminal."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None):
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.enabled = self.stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False
        self.label = label
        self.total = max(total, 1)
        self.start = time.monotonic()
        self.delay = _delay()
        self.last = 0.0
        self.drawn = False
        self.done = 0
        self.count = 0

    def add_total(self, extra: int) -> None:
        self.total += max(extra, 0)

    def update(self, done: int, count: int) -> None:
        self.done, self.count = done, count
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.delay or now - self.last < _INTERVAL:
            return
        self.last = now
        frac = min(done / self.total, 1.0)
        filled = int(frac * _WIDTH)
        bar = "#" * filled + "." * (_WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {frac * 100:5.1f}%  {count:,} commits  "
                          f"{now - self.start:.0f}s ")
        self.stream.flush()
        self.drawn = True

    def records(self, records: Iterable, sizes: Mapping[str, int]) -> Iterator:
        """Pass `records` through, advancing the bar as they move from segment to segment."""
        if not self.enabled:
            yield from records
            return
        done = self.done
        current, offset = None, 0
        n = self.count
        for rec in records:
            if rec.segment != current:
                if current is not None:
                    done += sizes.get(current, 0)
                current = rec.segment
            n += 1
            if n & 255 == 0:
                offset = min(rec.offset, sizes.get(current, 0))
                self.update(done + offset, n)
            yield rec
        if current is not None:
            done += sizes.get(current, 0)
        self.update(done, n)

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * (len(self.label) + _WIDTH + 50) + "\r")
            self.stream.flush()
            self.drawn = False
