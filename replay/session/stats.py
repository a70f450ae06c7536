"""What a session measures for `stats()`: the journal's fsyncs (counted and timed through the
I/O seam) and what the last restore handed back."""

from __future__ import annotations

import collections
import threading
import time

from journal.vfs import File, OsFileSystem

FSYNC_WINDOW = 4096  # the latencies the percentiles are taken over: the most recent fsyncs


class MeasuredFileSystem(OsFileSystem):
    """The real file system, counting and timing every fsync of the journal's files."""

    def __init__(self) -> None:
        self.fsyncs = 0
        self._recent: collections.deque[float] = collections.deque(maxlen=FSYNC_WINDOW)
        self._lock = threading.Lock()

    def fsync(self, f: File) -> None:
        start = time.perf_counter()
        super().fsync(f)
        elapsed = time.perf_counter() - start
        with self._lock:
            self.fsyncs += 1
            self._recent.append(elapsed)

    def latency_ms(self) -> dict[str, float | None]:
        """p50 and p99 of the recent fsyncs, in milliseconds (None before the first)."""
        with self._lock:
            recent = sorted(self._recent)
        if not recent:
            return {"fsync_p50_ms": None, "fsync_p99_ms": None}
        pick = lambda q: round(recent[min(len(recent) - 1, int(q * len(recent)))] * 1e3, 3)  # noqa: E731
        return {"fsync_p50_ms": pick(0.50), "fsync_p99_ms": pick(0.99)}
