"""Helpers shared by the benchmarks: figures with a reference, a ratio and a target; timing; output.

The machine that runs these is noisy (2 cores, shared), so a benchmark never
prints a bare number: every `Figure` carries a *reference* measured in the same
run (ideally interleaved with it, round by round) and the ratio between them.

A benchmark module builds a `Report`::

    report = Report("append", quick=args.quick, directory=args.dir)
    report.add(Figure("limit", "one-event commits, 1 thread", value, "commits/s",
                      reference=ref, reference_label="os.write+fdatasync loop",
                      target=Target(min_ratio=0.85)))
    return report

and `python -m bench` prints it as a markdown table or (`--json`) as one JSON
document. Other helpers: `Rounds` (collect interleaved samples, take medians),
`timed_loop` / `timed_threads` (run a body for a while, count operations),
`timed_alternating` (a figure and its reference in alternating short slices),
`scratch_dir`, `peak_rss_mib`, `environment`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator


@dataclass(frozen=True)
class Target:
    """What a figure must reach: an absolute value and/or a ratio to its reference (all must hold)."""

    min_value: float | None = None
    min_ratio: float | None = None
    max_value: float | None = None
    max_ratio: float | None = None

    def check(self, value: float, ratio: float | None) -> bool:
        ok = True
        if self.min_value is not None:
            ok &= value >= self.min_value
        if self.max_value is not None:
            ok &= value <= self.max_value
        if self.min_ratio is not None:
            ok &= ratio is not None and ratio >= self.min_ratio
        if self.max_ratio is not None:
            ok &= ratio is not None and ratio <= self.max_ratio
        return ok

    def describe(self, unit: str = "", times_less: bool = False) -> str:
        """The target in words; `times_less`: the ratio is reference / value (see `Figure`)."""
        parts = []
        if self.min_value is not None:
            parts.append(f">= {fmt_num(self.min_value)} {unit}".rstrip())
        if self.max_value is not None:
            parts.append(f"<= {fmt_num(self.max_value)} {unit}".rstrip())
        ref = "less than ref" if times_less else "ref"
        if self.min_ratio is not None:
            parts.append(f">= {self.min_ratio:g}x {ref}")
        if self.max_ratio is not None:
            parts.append(f"<= {self.max_ratio:g}x {ref}")
        return " and ".join(parts)


@dataclass
class Figure:
    """One measured value beside its reference (same run), their ratio, and an optional target.

    `times_less`: the ratio is reference / value (how many times less the value is), for
    figures where less is better and the target is a minimum factor. `not_run`: why the figure
    could not be measured (no value, no ratio; printed NOT RUN instead of PASS/MISS).
    `calibration`: the figure's inputs were chosen to meet its target (a calibration against a
    reference, not a result): printed "calibrated" when it does, MISS when it does not."""

    name: str                      # stable id for JSON consumers, e.g. "limit"
    label: str                     # what was measured, for humans
    value: float | None
    unit: str
    reference: float | None = None
    reference_label: str = ""
    target: Target | None = None   # None: informational, no PASS/MISS
    note: str = ""
    samples: list[float] = field(default_factory=list)            # per round
    reference_samples: list[float] = field(default_factory=list)  # per round
    times_less: bool = False
    not_run: str = ""
    calibration: bool = False

    @property
    def ratio(self) -> float | None:
        if self.not_run or self.reference is None:
            return None
        num, den = (self.reference, self.value) if self.times_less else (self.value, self.reference)
        if den == 0:
            return math.inf if self.times_less and num > 0 else None
        return num / den

    @property
    def passed(self) -> bool | None:
        if self.not_run or self.target is None:
            return None
        return self.target.check(self.value, self.ratio)

    @property
    def verdict(self) -> str:
        if self.not_run:
            return "NOT RUN"
        return {None: "info", True: "calibrated" if self.calibration else "PASS", False: "MISS"}[self.passed]

    def as_dict(self) -> dict:
        t = self.target
        ratio = self.ratio
        return {
            "name": self.name, "label": self.label, "value": None if self.not_run else self.value,
            "unit": self.unit, "reference": self.reference, "reference_label": self.reference_label,
            "ratio": "inf" if ratio == math.inf else ratio,
            "ratio_is": "reference/value" if self.times_less else "value/reference",
            "target": None if t is None else {
                "min_value": t.min_value, "max_value": t.max_value, "min_ratio": t.min_ratio,
                "max_ratio": t.max_ratio, "text": t.describe(self.unit, self.times_less)},
            "result": self.verdict, "note": self.not_run or self.note,
            "samples": self.samples, "reference_samples": self.reference_samples,
        }


class Report:
    """The figures of one benchmark run plus the environment they were measured in."""

    def __init__(self, benchmark: str, *, quick: bool, directory: str | None = None):
        self.benchmark = benchmark
        self.quick = quick
        self.figures: list[Figure] = []
        self.notes: list[str] = []
        self.tables: list[str] = []   # markdown blocks printed after the figures (their data: meta)
        self.meta: dict = {}
        self.started = time.time()
        self.env = environment(directory)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def all_passed(self) -> bool:
        return all(f.passed is not False for f in self.figures)

    def as_dict(self) -> dict:
        return {
            "benchmark": self.benchmark, "mode": "quick" if self.quick else "full",
            "seconds": round(time.time() - self.started, 2),
            "env": {**self.env, "loadavg_end": _loadavg(), "peak_rss_mib": peak_rss_mib()},
            "meta": self.meta, "figures": [f.as_dict() for f in self.figures], "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def to_markdown(self) -> str:
        """A markdown table (pasteable into a README), then the notes and the environment."""
        rows = ["| figure | value | reference | ratio | target | result |",
                "| --- | ---: | --- | ---: | --- | --- |"]
        for f in self.figures:
            ref = "-" if f.reference is None else f"{fmt_num(f.reference)} {f.unit} ({f.reference_label})"
            ratio = "-" if f.ratio is None else f"{f.ratio:.2f}x"
            value = "-" if f.not_run else f"{fmt_num(f.value)} {f.unit}"
            target = "-" if f.target is None else f.target.describe(f.unit, f.times_less)
            rows.append(f"| {f.label} | {value} | {ref} | {ratio} | {target} | {f.verdict} |")
        out = [f"### bench {self.benchmark} ({'quick' if self.quick else 'full'} run, "
               f"{time.time() - self.started:.0f} s)", "", *rows]
        for table in self.tables:
            out += ["", table]
        notes = ([f"- {f.label}: {f.not_run or f.note}" for f in self.figures if f.not_run or f.note]
                 + [f"- {n}" for n in self.notes])
        if notes:
            out += ["", *notes]
        e = self.env
        out += ["", f"Environment: Python {e['python']}, {e['cpus']} CPUs, {e['platform']}, "
                    f"{e['fs_type']} at {e['dir']}, load average {e['loadavg_start']} at start, "
                    f"{_loadavg()} at end; peak RSS {peak_rss_mib():.0f} MiB."]
        return "\n".join(out)


def fmt_num(x: float) -> str:
    """Human number: thousands separators, 3 significant digits below 100."""
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


class Rounds:
    """Samples of several quantities measured round by round (interleaved, so drifting load
    hits every quantity alike); `median(name)` summarises them."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def add(self, name: str, value: float) -> float:
        self.samples.setdefault(name, []).append(value)
        return value

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def figure(self, name: str, label: str, unit: str, *, value: str, reference: str | None = None,
               reference_label: str = "", target: Target | None = None, note: str = "") -> Figure:
        """A Figure from the medians of the `value` and `reference` sample series."""
        return Figure(name, label, self.median(value), unit,
                      reference=None if reference is None else self.median(reference),
                      reference_label=reference_label, target=target, note=note,
                      samples=list(self.samples[value]),
                      reference_samples=list(self.samples.get(reference, [])) if reference else [])


def timed_loop(body: Callable[[], int], seconds: float) -> float:
    """Call `body` (which returns how many operations it did) until `seconds` pass; ops per second."""
    n = 0
    clock = time.perf_counter
    start = clock()
    deadline = start + seconds
    while True:
        n += body()
        now = clock()
        if now >= deadline:
            return n / (now - start)


def timed_alternating(bodies: dict[str, Callable[[], int]], seconds: float,
                      slice_seconds: float = 0.25) -> dict[str, float]:
    """Like `timed_loop` for several bodies at once: run them in turn, `slice_seconds` each, until
    each had `seconds`; ops per second of each. Slices interleave finely, so a load change on a
    shared machine hits every body alike (use it for a figure and its reference)."""
    ops = dict.fromkeys(bodies, 0)
    spent = dict.fromkeys(bodies, 0.0)
    clock = time.perf_counter
    while True:
        for name, body in bodies.items():
            left = seconds - spent[name]
            if left <= 0:
                continue
            n = 0
            start = clock()
            deadline = start + min(slice_seconds, left)
            while True:
                n += body()
                now = clock()
                if now >= deadline:
                    break
            ops[name] += n
            spent[name] += now - start
        if all(t >= seconds for t in spent.values()):
            return {name: ops[name] / spent[name] for name in bodies}


def timed_threads(make_body: Callable[[int], Callable[[], int]], threads: int, seconds: float) -> float:
    """Run `threads` threads, each calling its own `make_body(i)()` (ops per call) until `seconds`
    pass; total operations per second, counting only calls that returned (time includes the join)."""
    bodies = [make_body(i) for i in range(threads)]
    counts = [0] * threads
    errors: list[BaseException] = []
    stop = threading.Event()
    barrier = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        body, n = bodies[i], 0
        barrier.wait()
        try:
            while not stop.is_set():
                n += body()
        except BaseException as exc:  # reported by the caller's thread
            errors.append(exc)
        counts[i] = n

    pool = [threading.Thread(target=run, args=(i,), name=f"bench-{i}", daemon=True)
            for i in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


@contextmanager
def scratch_dir(parent: str | None, prefix: str = "bench-") -> Iterator[str]:
    """A fresh directory under `parent` (default: the system temp dir), removed afterwards."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 20) if sys.platform == "darwin" else rss / 1024


def fs_type(path: str) -> str:
    """File system type of `path` (from /proc/mounts; "unknown" elsewhere)."""
    path = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    mnt = parts[1]
                    if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def environment(directory: str | None) -> dict:
    d = os.path.abspath(directory or tempfile.gettempdir())
    return {"python": platform.python_version(), "platform": platform.platform(terse=True),
            "cpus": os.cpu_count(), "dir": d, "fs_type": fs_type(d), "loadavg_start": _loadavg()}


def log(*args) -> None:
    """Progress to stderr (stdout stays the report, e.g. for --json)."""
    print(*args, file=sys.stderr, flush=True)
