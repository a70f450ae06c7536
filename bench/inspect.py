"""`python -m bench inspect`: `journal-inspect summary`, `replay.verify` and `replay.audit` on a
journal of 10 million events (1 million with --quick): wall time and peak RSS of each, run in
a child process of its own; and how fast the CLI answers on a small journal.

The journal is built fast with `sync="none"`: each commit is one transaction of
64 one-group events (the batch of the next step taken and admitted, the batch
of the current step finished and trained, 16 groups each; one `taken` per
commit carries a loader state), a committed checkpoint every 100 commits,
default 64 MiB segments. Everything after the build runs in child processes,
each measured on its own with `os.wait4`: `summary` through the real console
script (it is a CLI view), `verify` and `audit` as library calls
(`replay.verify(path)`, `replay.audit(path)`: what the CLI renders).

Figures:

1. peak RSS of `journal-inspect summary`, of `verify` and of `audit`; target <= 100 MiB for
   summary and verify (a 64 MiB segment is read a window at a time, not held whole).
   Memory must not grow with the number of events beyond the live state: the live set
   here is 32 groups whatever the length.
2. wall time of each, against the floor of the same run: a child process that only
   iterates `Reader.records()` over the active history (read, check and decode every
   frame, no fold). No target: the fold's cost in CPython bounds them (docs/benchmarks.md
   has the measured reason). Every child of the large journal runs `ROUNDS` times,
   interleaved, and its medians are reported.
3. `journal-inspect summary` of the demo journal (`journal-demo --kills 3 --epochs 1`: three
   timelines, two cuts), best of 3, beside the same journal with its cuts removed; target
   <= 0.5 s. `journal-inspect --help`, best of 3, beside a bare interpreter start; target
   <= 0.25 s.
4. the interpreter floor: peak RSS of a child that only imports `replay` (the CLI cannot
   go below it).
5. where the time goes, in CPU time per event (each child's user + system time from
   `os.wait4`): the bare scan; the fold on top of it (a child that hands the same records to
   `fold_records`, minus the scan); the imports each view adds beyond `journal`'s; and what
   summary and verify cost beyond the scan, the fold and their imports (per-event counting,
   checks, extra passes, wrappers). Informational: they explain the wall-time rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

from journal import GroupRef, Journal

from .common import Figure, Report, Target, log, scratch_dir

TARGET_MB = 100
DEMO_SUMMARY_SECONDS = 0.5
HELP_SECONDS = 0.25
ROUNDS = 3          # each child of the large journal runs this many times; medians are reported
TARGETED = ("summary", "verify")  # the rows with an RSS target; audit's are informational
BATCH = 16          # groups per step; 4 events per group per commit -> 64 events per commit
CHECKPOINT_EVERY = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=None,
                        help="events in the journal (default 10,000,000; 1,000,000 with --quick)")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="build the journal in DIR and keep it (reused when it already exists)")


def build(path: str, events: int) -> int:
    """Write about `events` events; returns the exact number written."""
    j = Journal.open(path, sync="none")
    written = 0
    idx = 0
    step = 0
    try:
        with j.transaction() as tx:
            cur = tx.taken([GroupRef(idx=i, task_name="math", epoch=0) for i in range(BATCH)],
                           loader_state={"epoch": 0, "pos": BATCH})
            tx.admitted(cur, target_step=1, policy_version=0)
        idx = BATCH
        written = 2
        commits = 0
        while written < events:
            step += 1
            with j.transaction() as tx:
                nxt = []
                for k in range(BATCH):
                    nxt += tx.taken([GroupRef(idx=idx + k, task_name="math", epoch=0)],
                                    loader_state={"epoch": 0, "pos": idx + BATCH} if k == BATCH - 1 else None)
                for g in nxt:
                    tx.admitted([g], target_step=step + 1, policy_version=step)
                for g in cur:
                    tx.finished([g], policy_version=step - 1)
                for g in cur:
                    tx.trained([g], step=step)
            idx += BATCH
            written += 4 * BATCH
            cur = nxt
            commits += 1
            if commits % CHECKPOINT_EVERY == 0:
                j.begin_checkpoint(step=step)
                j.commit_checkpoint(step=step)
                written += 2
    finally:
        j.close()
    return written


def _cli() -> list[str]:
    exe = shutil.which("journal-inspect")
    return [exe] if exe else [sys.executable, "-c", "import sys; from replay.cli import main; sys.exit(main())"]


class Child(NamedTuple):
    """One child process, measured: wall and CPU (user + system) seconds, peak RSS, exit code,
    and its output when it was asked for."""

    wall: float
    rss: float
    code: int
    cpu: float
    output: str = ""


def measure(argv: list[str], *, output: bool = False) -> Child:
    """Run `argv` as a child process and measure it; `output`: keep its stdout (a few lines:
    it is read after the child exits)."""
    start = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE if output else subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode not in (0,):
        log(f"  {' '.join(argv[-3:])}: exit {p.returncode}: {err.strip()[:300]}")
    rss = usage.ru_maxrss / (1 << 20) if sys.platform == "darwin" else usage.ru_maxrss / 1024
    out = p.stdout.read().decode() if output else ""
    return Child(wall, rss, p.returncode, usage.ru_utime + usage.ru_stime, out)


# the library call, in a child of its own so that its peak RSS is its own
_LIBRARY = {name: [sys.executable, "-c",
                   f"import sys, replay; sys.exit(0 if replay.{name}(sys.argv[1]).clean else 1)"]
            for name in ("verify", "audit")}

_FLOOR = ("import sys; from journal import Reader\n"
          "n = 0\n"
          "for rec in Reader(sys.argv[1]).records():\n"
          "    n += len(rec.commit.events)\n"
          "print(n)\n")

# the same records handed to the journal's fold: what any view that folds cannot go below
_FOLD = ("import sys; from journal import Reader, State; from journal.fold import fold_records; "
         "fold_records(State(), Reader(sys.argv[1]).records())")

# what each view imports (summary: the console script's `replay.cli`; verify: `replay`) beside
# what the scan imports (`journal`)
_IMPORTS = {name: [sys.executable, "-c", f"import {name}"] for name in ("journal", "replay", "replay.cli")}


def best_wall(argv: list[str], rounds: int = 3) -> float:
    """The shortest wall time of `rounds` runs of `argv` (each must exit 0)."""
    walls = []
    for _ in range(rounds):
        child = measure(argv)
        if child.code != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {child.code}")
        walls.append(child.wall)
    return min(walls)


def cli_latency(tmp: str) -> list[Figure]:
    """`journal-inspect summary` of the demo journal (and of a copy without its cuts), and
    `journal-inspect --help` (and a bare interpreter), best of 3 each."""
    out = os.path.join(tmp, "demo")
    log("journal-demo --kills 3 --epochs 1 ...")
    subprocess.run([sys.executable, "-c", "import sys; from examples.chaos import main; sys.exit(main())",
                    "--kills", "3", "--epochs", "1", "--out", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    demo = os.path.join(out, "journal")
    bare = shutil.copytree(demo, os.path.join(tmp, "demo-without-cuts"),
                           ignore=shutil.ignore_patterns("snapshots", "LOCK"))
    cuts = len(os.listdir(os.path.join(demo, "snapshots")))
    summary = best_wall(_cli() + ["summary", demo])
    summary_bare = best_wall(_cli() + ["summary", bare])
    help_wall = best_wall(_cli() + ["--help"])
    python_wall = best_wall([sys.executable, "-c", "pass"])
    return [
        Figure("demo_summary_seconds", f"journal-inspect summary of the demo journal ({cuts} cuts)",
               summary, "s", reference=summary_bare, reference_label="the same journal without its cuts",
               target=Target(max_value=DEMO_SUMMARY_SECONDS), note="best of 3"),
        Figure("help_seconds", "journal-inspect --help", help_wall, "s", reference=python_wall,
               reference_label="python -c pass", target=Target(max_value=HELP_SECONDS), note="best of 3"),
    ]


def _journal(args, tmp: str, events: int) -> str:
    """The large journal's path: built, or an existing --keep journal reused."""
    path = args.keep or os.path.join(tmp, "journal")
    if args.keep and os.path.isdir(path) and os.listdir(path):
        log(f"reusing the journal in {path}")
        return path
    log(f"building a journal of {events:,} events in {path} ...")
    t0 = time.perf_counter()
    written = build(path, events)
    log(f"  built {written:,} events in {time.perf_counter() - t0:.1f} s")
    return path


def _round(path: str) -> dict[str, Child]:
    """Every child of the large journal, measured one after the other."""
    out = {f"import {name}": measure(argv) for name, argv in _IMPORTS.items()}
    log("reader floor, and the fold on top of it ...")
    out["scan"] = measure([sys.executable, "-c", _FLOOR, path], output=True)  # prints the events
    out["fold"] = measure([sys.executable, "-c", _FOLD, path])
    log("journal-inspect summary ...")
    out["summary"] = measure(_cli() + ["summary", path])
    for name, argv in _LIBRARY.items():
        log(f"replay.{name}(path) ...")
        out[name] = measure(argv + [path])
    return out


def _children(path: str, rounds: int) -> dict[str, Child]:
    """Each child's median wall and CPU time over `rounds` rounds (every child once a round, so
    a change of load hits them alike), its highest peak RSS and its worst exit code."""
    samples = [_round(path) for _ in range(rounds)]
    out = {}
    for name in samples[0]:
        runs = [r[name] for r in samples]
        out[name] = Child(statistics.median(c.wall for c in runs), max(c.rss for c in runs),
                          max(runs, key=lambda c: c.code != 0).code,
                          statistics.median(c.cpu for c in runs), runs[0].output)
    return out


_WHAT = {"summary": "journal-inspect summary", "verify": "replay.verify", "audit": "replay.audit"}
_VIEW_IMPORTS = {"summary": "import replay.cli", "verify": "import replay"}  # what each view loads


def _views(report: Report, c: dict[str, Child], events: int) -> None:
    """Peak RSS of each view against its target; wall time beside the bare scan."""
    n = f"{events / 1e6:.0f}M events"
    for cmd in _WHAT:
        report.add(Figure(f"{cmd}_rss", f"{_WHAT[cmd]}, peak RSS ({n})", c[cmd].rss, "MiB",
                          reference=TARGET_MB, reference_label="target",
                          target=Target(max_value=TARGET_MB) if cmd in TARGETED else None,
                          note="" if c[cmd].code in (0, 1) else f"exit code {c[cmd].code}"))
    for cmd in _WHAT:
        report.add(Figure(f"{cmd}_seconds", f"{_WHAT[cmd]}, wall time ({n})", c[cmd].wall, "s",
                          reference=c["scan"].wall, reference_label="Reader.records() scan alone",
                          note=f"{events / c[cmd].wall:,.0f} events/s"))
    report.add(Figure("fold_seconds", f"Reader.records() + fold_records, wall time ({n})", c["fold"].wall,
                      "s", reference=c["scan"].wall, reference_label="Reader.records() scan alone",
                      note="the floor of any view that folds"))


def _breakdown(report: Report, c: dict[str, Child], events: int) -> None:
    """CPU per event of the scan, of the fold on top of it, and of what each view adds beyond
    both and beyond its own imports (every child's interpreter start is subtracted)."""
    per_event = 1e9 / events
    scan = (c["scan"].cpu - c["import journal"].cpu) * per_event
    report.add(Figure("scan_cpu_ns", "bare scan, CPU per event", scan, "ns"))
    report.add(Figure("fold_cpu_ns", "fold_records on top of the scan, CPU per event",
                      (c["fold"].cpu - c["scan"].cpu) * per_event, "ns", reference=scan,
                      reference_label="the scan"))
    for cmd, imports in _VIEW_IMPORTS.items():
        extra_imports = c[imports].cpu - c["import journal"].cpu
        rest = (c[cmd].cpu - c["fold"].cpu - extra_imports) * per_event
        report.add(Figure(f"{cmd}_rest_cpu_ns", f"{_WHAT[cmd]} beyond the scan, the fold and its imports, "
                          "CPU per event", rest, "ns", reference=scan, reference_label="the scan",
                          note=f"its imports beyond journal's: {extra_imports * 1e3:.0f} ms CPU "
                               f"(`{imports}`)"))


def run(args) -> Report:
    report = Report("inspect", quick=args.quick, directory=args.dir)
    events = args.events or (1_000_000 if args.quick else 10_000_000)
    with scratch_dir(args.dir, "bench-inspect-") as tmp:
        path = _journal(args, tmp, events)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
                   if os.path.isfile(os.path.join(path, f)))
        c = _children(path, ROUNDS)
        report.meta.update(events=int(c["scan"].output), journal_bytes=size, cli=" ".join(_cli()))
        small = cli_latency(tmp)
    n_events = int(c["scan"].output)
    _views(report, c, n_events)
    for figure in small:
        report.add(figure)
    base = c["import replay"]
    report.add(Figure("import_rss", "peak RSS of `import replay` alone", base.rss,
                      "MiB", reference=TARGET_MB, reference_label="target", note=f"{base.wall:.1f} s to start"))
    report.add(Figure("floor_rss", f"peak RSS of the Reader.records() scan alone ({n_events / 1e6:.0f}M events)", c["scan"].rss, "MiB",
                      reference=TARGET_MB, reference_label="target"))
    _breakdown(report, c, n_events)
    report.note(f"journal: {size / (1 << 20):,.0f} MiB on disk in 64 MiB segments; live set 32 groups.")
    return report
