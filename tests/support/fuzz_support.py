"""Shared pieces of the fuzz tests: the corpus, the outcome rules, the guards.

The corpus is a real journal: rotated 4 KiB segments, archived (.wal.zst)
segments and a cut from a compaction with retention, and a resumed branch
(timeline 2). Every fuzz example copies it, mutates one file and runs every
reader over the copy. The only outcomes allowed are success or a documented
exception class; a `Guard` turns a hang into a failure (SIGALRM) and fails an
example whose Python-level allocation peak (tracemalloc) exceeds a bound
that no honest input of that size needs.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import tracemalloc
import zlib

import pytest

from tests.support.crash_oracle import Run, loader, w_compact_archive
from journal import Journal, JournalError, Reader, format as fmt
from journal.reader import MODES
from journal.ever import max_group_id
from replay import RestoreError, restore

EXAMPLES = int(os.environ.get("OJ_FUZZ_EXAMPLES", "60"))
DERANDOMIZE = os.environ.get("OJ_FUZZ_RANDOM") != "1"  # CI: the same inputs every run
TIMEOUT = float(os.environ.get("OJ_FUZZ_TIMEOUT", "20"))


class Hang(Exception):
    pass


class Guard:
    """`with Guard(input_bytes):` fails on a hang (> TIMEOUT s) or an allocation peak above
    `limit` (default: 32 MiB + 16x the input, generous for every honest code path)."""

    def __init__(self, input_size: int, limit: int | None = None, vm_limit: int = 768 << 20):
        self.limit = limit if limit is not None else (32 << 20) + 16 * input_size
        self.vm_limit = vm_limit  # growth of the process's peak virtual size (torch allocations)

    def __enter__(self):
        def alarm(signum, frame):
            raise Hang(f"no result after {TIMEOUT} s")
        self._old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, TIMEOUT)
        self._tracing = not tracemalloc.is_tracing()
        if self._tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        self._vm = _vm_peak()
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)
        _, peak = tracemalloc.get_traced_memory()
        if self._tracing:
            tracemalloc.stop()
        self.peak = peak
        if exc[0] is None and peak > self.limit:
            raise AssertionError(f"allocation peak {peak} bytes exceeds {self.limit}: an allocation "
                                 "driven by an unchecked length")
        grew = _vm_peak() - self._vm
        if exc[0] is None and self._vm and grew > self.vm_limit:
            raise AssertionError(f"peak virtual memory grew by {grew} bytes (> {self.vm_limit}): an "
                                 "allocation outside Python's allocator (torch) driven by a length")
        return False


def _vm_peak() -> int:
    """VmPeak of this process in bytes (0 where /proc is not there). tracemalloc does not see
    torch's allocator; the peak virtual size does, even for untouched pages."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def build_corpus(root: str) -> Run:
    """The corpus journal (see the module docstring)."""
    run = Run(root)
    w_compact_archive(run)
    rs = restore(root)
    j = run.open(resume=rs)
    g = j.taken([__import__("journal").GroupRef(idx=500, task_name="t")], loader_state=loader(50))
    j.admitted(g, target_step=9, policy_version=2)
    j.close()
    return run


def outcome(fn, *args, allowed=(JournalError, RestoreError), **kw):
    """Run `fn`; return the result or the allowed exception; anything else propagates."""
    try:
        return fn(*args, **kw)
    except allowed as exc:
        return exc


def read_everything(path: str) -> None:
    """Every read path over a (possibly damaged) journal directory; allowed: JournalError,
    RestoreError. Then Journal.open (which may repair), last."""
    for mode in MODES:
        def scan():
            r = Reader(path, mode)
            for _ in r.records():
                pass
            r.fold()
            for _t, _b, recs in r.dead_tails():
                for _ in recs:
                    pass
            max_group_id(r)
        outcome(scan)
    for at in ("latest-checkpoint", "end"):
        outcome(restore, path, at)
    def reopen():
        Journal.open(path).close()
    outcome(reopen)


def frame_offsets(data: bytes) -> list[int]:
    """Offsets of the frames of an intact segment."""
    out, pos = [], fmt.HEADER_SIZE
    while pos + fmt.FRAME_HEADER_SIZE <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        out.append(pos)
        pos += fmt.FRAME_HEADER_SIZE + length
    return out


def segment_frames(data: bytes) -> tuple[bytes, list[list[bytes]]]:
    """(header bytes, frames as lists of commit records) of an intact segment."""
    frames = []
    for pos in frame_offsets(data):
        (length,) = struct.unpack_from("<I", data, pos)
        payload = data[pos + fmt.FRAME_HEADER_SIZE:pos + fmt.FRAME_HEADER_SIZE + length]
        frames.append([bytes(r) for r in fmt.split_records(payload)])
    return data[:fmt.HEADER_SIZE], frames


def encode_segment(header: bytes, frames: list[list[bytes]]) -> bytes:
    """A segment whose frame checksums and chain are all valid for these records (so a
    mutation of a record reaches the decoder and the fold, not just the CRC check)."""
    chain = fmt.decode_header(header).chain_seed
    out = [header]
    for records in frames:
        frame, chains = fmt.encode_frame(records, chain)
        chain = chains[-1]
        out.append(frame)
    return b"".join(out)


def copy_corpus(src: str, dst: str) -> str:
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def crc_fix(data: bytearray, pos: int) -> None:
    """Recompute the CRC of the frame at `pos` (its length field must be in bounds)."""
    (length,) = struct.unpack_from("<I", data, pos)
    body = bytes(data[pos + 12:pos + 12 + length])
    struct.pack_into("<I", data, pos + 4, zlib.crc32(body))


def summary_fixture(counts: dict[str, int], label: str):
    """A module-scoped autouse fixture that prints how many fuzz inputs of each kind ran."""
    @pytest.fixture(scope="module", autouse=True)
    def summary(request):
        yield
        if not counts:
            return
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled():
            print(f"\nfuzzed {label} inputs: {sum(counts.values())} "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})")
    return summary
