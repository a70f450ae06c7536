"""`python -m bench peers`: the same group lifecycle on this library and on straw-queue 0.1.6.

straw (PyPI `straw-queue`, https://github.com/zhuzilin/straw) is the Rust write-ahead-logged
task queue slime runs its rollouts through: tasks with leases, progress, accepted results and
consumer state, payloads packed into large append-only files on a shared file system. The
bench drives both the way their authors document them (`bench/peers_lifecycles.py` holds the
lifecycle and says what each step maps to): every step durable before the next, one group at
a time, in one process.

Figures, each library in the same run (`--rounds` rounds; in each, every lifecycle runs in
alternating 0.25 s slices for `--seconds`, so a load change on a shared machine hits all alike;
medians over rounds):

1. durable groups/s and transitions/s, without payloads: ours (`replay.Session`, the rows'
   locators journaled, the rows held elsewhere) vs straw (tasks without input, results of
   records with no bytes). Target: >= 5x straw's groups/s (`peers_groups_vs_straw`).
2. the same with payloads (4 rollouts x 4,096 tokens, int32 ids + float32 logprobs: 32 KiB
   each): ours through `replay.LocalDataPlane`, straw in its packs. Target: >= 3x straw's
   (`peers_payload_groups_vs_straw`).
3. reference: stdlib sqlite3 (WAL, `synchronous=FULL`) running `bench append`'s lifecycle:
   4 one-row transactions per group (taken, admitted, finished, trained).
4. syncs per group: ours through the journal's I/O seam (`Session.stats()["fsyncs"]`, in the
   timed rounds); straw's, and all of ours (the data plane's too), by tracing a child process
   (`strace -f`, fsync/fdatasync/sync_file_range/syncfs/msync between two markers, after a
   warm-up). straw's own counter (`store.backend.metrics["syncs"]`) counts only the syncs its
   Python fault hook is called before; it is printed beside the trace's count, not used.
5. bytes on disk per group: the regular files of each library's directory after the round's
   close (ours: journal and data plane; straw: its pool), over the groups it completed.
   Target without payloads: <= 1/20 of straw's (`peers_bytes_vs_straw`; ratio straw / ours).
6. with N groups in flight (`--concurrency`, default 1, 8, 64 and 256; 1 always runs, the
   figures above): each side at its best (`bench/peers_lifecycles.py`, its second table):
   ours N coroutines on one `AsyncSession` (take, admit and trained once per N; each
   coroutine writes its group's prefix and seals its rollouts; the seals in flight share one
   write and sync of their rows and one fsync of their commits), straw its batch calls on one thread (one submit, acquire and
   publish_many per N, a completion per group, the consumer's state once per step), sqlite3
   with straw's batching. groups/s of each, with and without payloads, alternating slices as
   above (every call runs a step of N groups); targets at N = 64: >= 5x straw without payloads
   (`peers_groups_vs_straw_64`), >= 3x with (`peers_payload_groups_vs_straw_64`). The
   durable steps per group of each side and their syncs per group (traced as in 4) are a table.
7. reopen after a history of 1x, 10x and 100x `--history` groups without payloads (ours
   checkpoints every 64 groups, as a trainer does): in a fresh process, time of what a restart
   does (ours `Session.open`, straw `Coordinator(recover=True)` and its producer's and
   consumer's states) and the child's peak RSS (its VmHWM: the ru_maxrss that `getrusage` or
   `os.wait4` gives for a child is floored at the parent's RSS at the fork, which Linux carries
   across the exec). Target at 100x: ours <= 1/10 of straw's (`peers_rss_vs_straw`; ratio
   straw / ours). Beside them, a fresh process that only imports torch: what ours would pay if
   its restore loaded a cut's `.pt` tables (it reads the cut's state file; the rows say whether
   torch was imported).

Not like for like, and said in the output:
- straw stores payloads itself and publishes a record for every result and consumer state
  (with records of no bytes when there is no payload); ours journals locators, the rows are in
  a data plane (`LocalDataPlane` with payloads) or elsewhere (without).
- straw runs multi-host machinery on every step: leases with epochs and tokens, receipts,
  writer incarnations, publication staging; ours has one writer per journal.
- straw completes a group as one result (its 4 rollouts in one publication); ours seals each
  rollout on its own (4 commits; with payloads, 4 puts), as its workers finish.
- straw's tasks carry no input here (slime publishes each prompt group as its task's input);
  ours rebuilds prompts from the dataset.
- straw reopens at its log's head and replays all of it; ours restores its newest committed
  checkpoint (from its newest cut's state file, no torch) and continues the journal.
- the histories are written on tmpfs (`--history-dir`; same files, the fsyncs free) so that a
  100x history of straw takes seconds.
- the progress step runs on both sides or on neither: only when `replay.Session.progress`
  exists; otherwise every row says "without progress: Session.progress is not in this build".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from replay import Session

from .append import median_round
from .common import Figure, Report, Rounds, Target, fmt_num, log, scratch_dir, timed_alternating
from .peers_lifecycles import (CONCURRENCY, LIBRARIES, PREFIX_TOKENS, ROLLOUTS, STEP_GROUPS, TOKENS,
                               WARMUP_GROUPS, durable_steps)

STRAW_VERSION = "0.1.6"   # the version the lifecycle follows (the `peers` extra pins it)
MISSING = (f"bench peers needs straw-queue=={STRAW_VERSION} (the `peers` extra, used by this "
           f"benchmark alone): pip install -e '.[peers]', or pip install straw-queue=={STRAW_VERSION}")
PROGRESS = hasattr(Session, "progress")
WITHOUT_PROGRESS = "without progress: Session.progress is not in this build"
SYNC_CALLS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "msync")
TARGETS = {"groups": 5.0, "payload_groups": 3.0, "bytes": 20.0, "rss": 10.0}
TARGET_CONCURRENCY = (1, 64)   # the groups in flight whose groups/s figures have the targets above
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# transitions per group: ours, the events journaled; straw, the queue's journal transactions
TRANSITIONS = {"ours": 3 + ROLLOUTS + 1 + PROGRESS, "straw": 4 + PROGRESS, "sqlite": 4}
LIFECYCLE = {
    "ours": "take, admit(rollouts=4), " + ("progress, " if PROGRESS else "") + "4 seals (the last "
            "also finished), trained: " + f"{TRANSITIONS['ours']} events in {TRANSITIONS['ours'] - 1} commits",
    "straw": "submit_tasks with producer state, acquire, " + ("publish + save_task_progress, " if PROGRESS
             else "") + "publish + complete_task, publish + save_consumer_state: "
             f"{TRANSITIONS['straw']} queue transactions, {2 + PROGRESS} publications",
    "sqlite": "taken, admitted, finished, trained: 4 one-row transactions (bench append's lifecycle)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds per lifecycle per round (default 0.4 quick, 2 full)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds, medians reported (default 2 quick, 5 full)")
    parser.add_argument("--history", type=int, default=None,
                        help="groups of the 1x history; 10x and 100x are measured too (default 10 quick, 200 full)")
    parser.add_argument("--history-dir", default=None,
                        help="where the histories are written (default /dev/shm when it exists, else --dir)")
    parser.add_argument("--sync-groups", type=int, default=None,
                        help="groups per traced child counting syncs, at least one step of N (default 10 "
                             "quick, 100 full)")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)),
                        help="groups in flight, a comma-separated list (default %(default)s); 1 is the "
                             "one-group-at-a-time lifecycle")


def straw_version() -> str | None:
    """The installed straw-queue's version, None when it is missing or does not import."""
    try:
        import straw  # noqa: F401
        return importlib.metadata.version("straw-queue")
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return None


# -- the timed rounds ----------------------------------------------------------------------------

def key_of(lib: str, payloads: bool, concurrency: int) -> str:
    """The name of a lifecycle's samples: "ours", "straw_payload", ... at concurrency 1 (the
    names the one-group figures always had), "c64_ours", ... above it."""
    key = lib + ("_payload" if payloads else "")
    return key if concurrency == 1 else f"c{concurrency}_{key}"


LIFECYCLES = (("ours", False), ("ours", True), ("straw", False), ("straw", True), ("sqlite", False))


def measure_round(parent: str | None, seconds: float, concurrency: int, r: Rounds, totals: dict) -> None:
    """One round at `concurrency`: fresh directories, every lifecycle in alternating slices;
    adds the rates to `r` and the groups, bytes and seam fsyncs to `totals`."""
    with scratch_dir(parent, "bench-peers-") as d:
        lives = {}
        try:
            for lib, payloads in LIFECYCLES:
                key = key_of(lib, payloads, concurrency)
                lives[key] = LIBRARIES[lib](os.path.join(d, key), payloads=payloads, progress=PROGRESS,
                                            concurrency=concurrency)
            rates = timed_alternating({k: life.run for k, life in lives.items()}, seconds)
            for key, life in lives.items():
                t = totals.setdefault(key, {"groups": 0, "completed": 0, "bytes": 0})
                t["groups"] += life.groups
                t["completed"] += life.completed()
                if life.name == "ours":
                    seam = life.seam_fsyncs()
                    t["seam_fsyncs"] = t.get("seam_fsyncs", 0) + seam
                    r.add(f"{key}_seam", seam / life.groups)
        finally:
            for life in lives.values():
                life.close()
        for key, life in lives.items():
            size = life.bytes()
            totals[key]["bytes"] += size
            r.add(f"{key}_bytes", size / life.groups)
        for key, rate in rates.items():
            r.add(key, rate)
            if concurrency == 1:
                lib = key.split("_")[0]
                r.add(f"{key}_transitions", rate * TRANSITIONS[lib])


# -- children --------------------------------------------------------------------------------------

def run_child(argv: list[str]) -> tuple[dict, int]:
    """Run `argv` (a child printing one JSON line) from the project's root; its output and
    ru_maxrss in KiB (os.wait4's rusage of the child: at least this process's RSS at the fork,
    see `peers_lifecycles.peak_rss_kib`)."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        p = subprocess.Popen(argv, stdout=out_f, stderr=err_f, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        if code != 0:
            raise RuntimeError(f"child {' '.join(argv[-6:])} exited {code}: "
                               f"{err_f.read().decode(errors='replace')[-2000:]}")
        lines = out_f.read().decode().strip().splitlines()
    return json.loads(lines[-1]), usage.ru_maxrss


def _child(mode: str, *args) -> list[str]:
    return [sys.executable, "-m", "bench.peers_lifecycles", mode, *map(str, args)]


_TRACE_LINE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((.*)")


def count_syncs(trace: str) -> dict[str, int]:
    """Sync calls of every thread in an `strace -f -o` file between the chdir into
    `marker-start` and the chdir into `marker-stop`, by call."""
    counts = dict.fromkeys(SYNC_CALLS, 0)
    inside = False
    with open(trace) as f:
        for line in f:
            m = _TRACE_LINE.match(line)
            if m is None:
                continue   # "<... resumed>" halves and signals: the call was counted when it began
            call, rest = m.groups()
            if call == "chdir":
                if "marker-start" in rest:
                    inside = True
                elif "marker-stop" in rest:
                    break
            elif inside and call in counts:
                counts[call] += 1
    return counts


def measure_syncs(parent: str | None, groups: int, concurrency: int, out: dict) -> dict:
    """Per lifecycle at `concurrency`: sync calls per group of a traced child, and what the
    child completed, into `out` (keyed as `key_of`; nothing without strace, `out["strace"]`
    None)."""
    strace = out.setdefault("strace", shutil.which("strace"))
    if strace is None:
        return out
    with scratch_dir(parent, "bench-peers-syncs-") as d:
        for lib, payloads in LIFECYCLES:
            key = key_of(lib, payloads, concurrency)
            trace = os.path.join(d, f"{key}.trace")
            argv = [strace, "-f", "-qq", "-e", "trace=" + ",".join(SYNC_CALLS + ("chdir",)), "-o", trace,
                    *_child("syncs", lib, os.path.join(d, key), groups, int(payloads), int(PROGRESS),
                            concurrency)]
            result, _ = run_child(argv)
            calls = count_syncs(trace)
            counted = result["counted"]
            out[key] = {**result, "calls": calls, "per_group": sum(calls.values()) / counted}
            log(f"  {key}: {out[key]['per_group']:.2f} syncs per group (strace)"
                + (f", journal through the seam {result['seam_fsyncs'] / counted:.2f}" if lib == "ours"
                   else f", its own counter {result['own_counter'] / counted:.2f}" if lib == "straw" else ""))
    return out


def history_dir(args) -> str | None:
    if args.history_dir:
        return os.path.abspath(args.history_dir)
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return os.path.abspath(args.dir) if args.dir else None


def measure_reopens(parent: str | None, base: int, rounds: int) -> dict:
    """Per history size ("1x", "10x", "100x"): each library's history (built in a child), then
    `rounds` reopens of each in fresh children, alternating; the histories are removed once
    measured."""
    out = {}
    with scratch_dir(parent, "bench-peers-history-") as d:
        for label, groups in (("1x", base), ("10x", 10 * base), ("100x", 100 * base)):
            size = {"groups": groups}
            for lib in ("ours", "straw"):
                built, _ = run_child(_child("history", lib, os.path.join(d, f"{lib}-{label}"), groups))
                size[lib] = {"history": built, "reopens": []}
                log(f"  {label}: {lib} history of {groups:,} groups in {built['seconds']:.1f} s, "
                    f"{built['bytes'] / 2**20:.1f} MiB")
            for i in range(rounds):
                for lib in (("ours", "straw") if i % 2 == 0 else ("straw", "ours")):
                    reopened, wait4_kib = run_child(_child("reopen", lib, os.path.join(d, f"{lib}-{label}")))
                    size[lib]["reopens"].append({**reopened, "wait4_maxrss_kib": wait4_kib})
            for lib in ("ours", "straw"):
                runs = size[lib]["reopens"]
                size[lib]["seconds"] = statistics.median(x["seconds"] for x in runs)
                size[lib]["peak_rss_mib"] = statistics.median(x["peak_rss_kib"] for x in runs) / 1024
                size[lib]["rss_after_imports_mib"] = statistics.median(x["rss_after_imports_kib"] for x in runs) / 1024
                shutil.rmtree(os.path.join(d, f"{lib}-{label}"))
            log(f"  {label}: reopen ours {size['ours']['seconds']:.3f} s, {size['ours']['peak_rss_mib']:.0f} MiB; "
                f"straw {size['straw']['seconds']:.3f} s, {size['straw']['peak_rss_mib']:.0f} MiB")
            out[label] = size
    return out


# -- the report ------------------------------------------------------------------------------------

def _label(text: str) -> str:
    return text if PROGRESS else f"{text} ({WITHOUT_PROGRESS})"


def _throughput_figures(report: Report, r: Rounds, straw: str) -> None:
    """Each figure shows the round whose ratio is the median of the per-round ratios: the value
    and its reference measured side by side, whatever the load did between rounds."""
    report.add(median_round(
        r, "peers_groups_vs_straw", _label("durable groups/s, no payloads"), "groups/s",
        value="ours", reference="straw", reference_label=f"{straw}, same lifecycle, alternating slices",
        target=Target(min_ratio=TARGETS["groups"]),
        note=f"ours: {LIFECYCLE['ours']}; straw: {LIFECYCLE['straw']}"))
    report.add(median_round(
        r, "peers_payload_groups_vs_straw",
        _label("durable groups/s, 4 x 32 KiB payloads per group in the library's data plane (LocalDataPlane)"),
        "groups/s", value="ours_payload", reference="straw_payload",
        reference_label=f"{straw}, payloads in its packs", target=Target(min_ratio=TARGETS["payload_groups"]),
        note=f"a rollout: {TOKENS:,} tokens, int32 ids + float32 logprobs; ours puts each rollout's rows "
             "at its seal (appended to a pack and fdatasynced), straw publishes a group's 4 "
             "rollouts as one result"))
    report.add(median_round(
        r, "peers_transitions_vs_straw", _label("durable transitions/s, no payloads"), "transitions/s",
        value="ours_transitions", reference="straw_transitions", reference_label=straw,
        note=f"groups/s x transitions per group: ours {TRANSITIONS['ours']} (events), straw "
             f"{TRANSITIONS['straw']} (queue transactions)"))
    report.add(median_round(
        r, "peers_payload_transitions_vs_straw", _label("durable transitions/s, with payloads"),
        "transitions/s", value="ours_payload_transitions", reference="straw_payload_transitions",
        reference_label=straw))
    report.add(median_round(
        r, "peers_groups_vs_sqlite", _label("durable groups/s, no payloads, vs sqlite3"), "groups/s",
        value="ours", reference="sqlite",
        reference_label="sqlite3 WAL synchronous=FULL, 4 one-row transactions per group",
        note="sqlite runs bench append's lifecycle (taken, admitted, finished, trained), not the seals"))


def _sync_figures(report: Report, r: Rounds, syncs: dict, straw: str) -> None:
    traced = syncs.get("strace") is not None
    no_trace = "not measured: strace is not installed (straw's syncs are counted by tracing its process)"
    ours_traced = syncs["ours"]["per_group"] if traced else None
    report.add(Figure(
        "peers_syncs", _label("syncs per group, no payloads: ours through the journal's I/O seam"),
        r.median("ours_seam"), "syncs/group", reference=syncs["straw"]["per_group"] if traced else None,
        reference_label=f"{straw}, sync calls of its process (strace -f)", times_less=True,
        samples=list(r.samples["ours_seam"]),
        note="ours: Session.stats()['fsyncs'] over the groups of the timed rounds (median round)"
             + (f"; the same lifecycle traced like straw's: {ours_traced:.2f} syncs per group; straw's "
                f"own counter (backend.metrics['syncs'], the syncs its fault hook sees): "
                f"{syncs['straw']['own_counter'] / syncs['straw']['counted']:.2f}" if traced else
                "; strace is not installed, so straw's are not counted")))
    seam = r.median("ours_payload_seam")
    report.add(Figure(
        "peers_payload_syncs", _label("syncs per group, with payloads: journal and data plane"),
        syncs["ours_payload"]["per_group"] if traced else None, "syncs/group",
        reference=syncs["straw_payload"]["per_group"] if traced else None,
        reference_label=f"{straw}, sync calls of its process (strace -f)", times_less=True,
        not_run="" if traced else no_trace,
        note=f"both by strace -f of a child process; of ours, {seam:.2f} per group through the journal's "
             "seam (the rest: the data plane's pack fdatasyncs)"))


def _bytes_figures(report: Report, r: Rounds, totals: dict, straw: str) -> None:
    per = {k: t["bytes"] / t["groups"] for k, t in totals.items()}
    report.add(Figure(
        "peers_bytes_vs_straw", _label("bytes on disk per group, no payloads"), per["ours"], "B/group",
        reference=per["straw"], reference_label=f"{straw}, its pool", times_less=True,
        target=Target(min_ratio=TARGETS["bytes"]),
        samples=list(r.samples["ours_bytes"]), reference_samples=list(r.samples["straw_bytes"]),
        note=f"the files after the rounds' close over the groups completed ({totals['ours']['groups']:,} "
             f"and {totals['straw']['groups']:,}); ours: the journal (the rows are elsewhere), straw: its "
             "journal, manifests and records of no bytes"))
    report.add(Figure(
        "peers_payload_bytes", _label("bytes on disk per group, with payloads"), per["ours_payload"], "B/group",
        reference=per["straw_payload"], reference_label=f"{straw}, its pool", times_less=True,
        samples=list(r.samples["ours_payload_bytes"]),
        reference_samples=list(r.samples["straw_payload_bytes"]),
        note=f"the payload itself: {ROLLOUTS} x {TOKENS * 8:,} B = {ROLLOUTS * TOKENS * 8:,} B per group"
             + (f" plus a {PREFIX_TOKENS * 8:,} B prefix" if PROGRESS else "")
             + "; ours: journal + LocalDataPlane (packs), straw: packs"))


def _reopen_figures(report: Report, reopens: dict, torch: dict, straw: str) -> None:
    """`torch`: a fresh process that only imports torch (what a restore loading `.pt` tables would pay)."""
    for label, size in reopens.items():
        ours, theirs = size["ours"], size["straw"]
        groups = size["groups"]
        report.add(Figure(
            f"peers_reopen_{label}", f"reopen after {label} history ({groups:,} groups): time", ours["seconds"],
            "s", reference=theirs["seconds"], reference_label=f"{straw}, Coordinator(recover=True)",
            times_less=True, samples=[x["seconds"] for x in ours["reopens"]],
            reference_samples=[x["seconds"] for x in theirs["reopens"]],
            note="ours: Session.open (restore of the newest checkpoint, the journal continued); "
                 f"torch imported by it: {'yes' if ours['reopens'][0]['torch_imported'] else 'no'} (a "
                 f"fresh process importing torch alone: {torch['seconds']:.2f} s, "
                 f"{torch['peak_rss_kib'] / 1024:.0f} MiB)"))
        name = "peers_rss_vs_straw" if label == "100x" else f"peers_reopen_rss_{label}"
        report.add(Figure(
            name, f"reopen after {label} history ({groups:,} groups): peak RSS of the process",
            ours["peak_rss_mib"], "MiB", reference=theirs["peak_rss_mib"],
            reference_label=f"{straw}, the same in its process", times_less=True,
            target=Target(min_ratio=TARGETS["rss"]) if label == "100x" else None,
            samples=[x["peak_rss_kib"] / 1024 for x in ours["reopens"]],
            reference_samples=[x["peak_rss_kib"] / 1024 for x in theirs["reopens"]],
            note=f"a fresh process each, its VmHWM (getrusage's ru_maxrss of a child starts at the "
                 f"parent's RSS); after its imports: ours {ours['rss_after_imports_mib']:.0f} "
                 f"MiB, straw {theirs['rss_after_imports_mib']:.0f} MiB"))


def _concurrency_figures(report: Report, r: Rounds, n: int, straw: str) -> None:
    """groups/s with N groups in flight, ours against straw (with and without payloads) and
    sqlite3; the targets at N in TARGET_CONCURRENCY. Each the median round, as above."""
    target = n in TARGET_CONCURRENCY
    c = f"c{n}_"
    report.add(median_round(
        r, f"peers_groups_vs_straw_{n}", _label(f"durable groups/s, no payloads, {n} groups in flight"),
        "groups/s", value=c + "ours", reference=c + "straw",
        reference_label=f"{straw}, its batch calls, alternating slices",
        target=Target(min_ratio=TARGETS["groups"]) if target else None,
        note=f"ours: {n} coroutines on one AsyncSession, take/admit/trained once per {n}; straw: "
             f"submit_tasks, acquire, publish_many (+ save_task_progress_many) once per {n}, "
             "complete_task per group, consumer state once per step"))
    report.add(median_round(
        r, f"peers_payload_groups_vs_straw_{n}",
        _label(f"durable groups/s, 4 x 32 KiB payloads per group, {n} groups in flight"), "groups/s",
        value=c + "ours_payload", reference=c + "straw_payload",
        reference_label=f"{straw}, payloads in its packs, publish_many",
        target=Target(min_ratio=TARGETS["payload_groups"]) if target else None))
    report.add(median_round(
        r, f"peers_groups_vs_sqlite_{n}", _label(f"durable groups/s, no payloads, {n} groups in flight, vs sqlite3"),
        "groups/s", value=c + "ours", reference=c + "sqlite",
        reference_label="sqlite3 WAL synchronous=FULL, straw's batching"))


def _concurrency_table(r: Rounds, concurrency: list[int], syncs: dict, straw: str) -> str:
    """Per N: each side's groups/s (median of the rounds), durable steps and syncs per group."""
    traced = syncs.get("strace") is not None
    rows = [f"| groups in flight | side | groups/s, no payloads | groups/s, with payloads | durable steps "
            f"per group | syncs per group, no payloads / with (strace) |",
            "| ---: | --- | ---: | ---: | ---: | --- |"]
    for n in concurrency:
        for lib, name in (("ours", "ours (`replay.Session`)"), ("straw", straw), ("sqlite", "sqlite3 WAL FULL")):
            key, pay = key_of(lib, False, n), key_of(lib, True, n)
            with_payloads = fmt_num(r.median(pay)) if pay in r.samples else "-"
            sync = "-" if not traced else (f"{syncs[key]['per_group']:.2f}" + (
                f" / {syncs[pay]['per_group']:.2f}" if pay in syncs else ""))
            rows.append(f"| {n} | {name} | {fmt_num(r.median(key))} | {with_payloads} | "
                        f"{durable_steps(lib, n, PROGRESS):.2f} | {sync} |")
    return "\n".join(rows)


def _table(r: Rounds, totals: dict, syncs: dict, reopens: dict, straw: str) -> str:
    traced = syncs.get("strace") is not None

    def per(key: str) -> str:
        return fmt_num(totals[key]["bytes"] / totals[key]["groups"])

    def traced_syncs(key: str) -> str:
        return f"{syncs[key]['per_group']:.2f}" if traced else "-"

    ratios = [o / t for o, t in zip(r.samples["ours"], r.samples["straw"])]
    k = ratios.index(statistics.median_low(ratios))  # one round for every rate: they ran side by side

    def rate(key: str) -> str:
        return fmt_num(r.samples[key][k])

    rows = [f"| per group (rates: round {k + 1}, whose ours/straw ratio is the median) | ours "
            f"(`replay.Session`) | {straw} | sqlite3 WAL FULL |",
            "| --- | ---: | ---: | ---: |",
            f"| lifecycle | {LIFECYCLE['ours']} | {LIFECYCLE['straw']} | {LIFECYCLE['sqlite']} |",
            f"| groups/s, no payloads | {rate('ours')} | {rate('straw')} | {rate('sqlite')} |",
            f"| transitions/s, no payloads | {rate('ours_transitions')} | {rate('straw_transitions')} | "
            f"{rate('sqlite_transitions')} |",
            f"| groups/s, with payloads | {rate('ours_payload')} | {rate('straw_payload')} | - |",
            f"| syncs per group, no payloads (strace) | {traced_syncs('ours')} (seam: "
            f"{r.median('ours_seam'):.2f}) | {traced_syncs('straw')} | - |",
            f"| syncs per group, with payloads (strace) | {traced_syncs('ours_payload')} (seam: "
            f"{r.median('ours_payload_seam'):.2f}) | {traced_syncs('straw_payload')} | - |",
            f"| bytes on disk per group, no payloads | {per('ours')} | {per('straw')} | - |",
            f"| bytes on disk per group, with payloads | {per('ours_payload')} | {per('straw_payload')} | - |"]
    for label, size in reopens.items():
        o, s = size["ours"], size["straw"]
        rows.append(f"| reopen after {label} ({size['groups']:,} groups): s, peak MiB | {o['seconds']:.3f}, "
                    f"{o['peak_rss_mib']:.0f} | {s['seconds']:.3f}, {s['peak_rss_mib']:.0f} | - |")
    o, s = reopens["100x"]["ours"], reopens["100x"]["straw"]
    rows.append(f"| on disk after the 100x history | {o['history']['bytes'] / 2**20:.1f} MiB | "
                f"{s['history']['bytes'] / 2**20:.1f} MiB | - |")
    grow = {lib: reopens["100x"][lib]["seconds"] / reopens["1x"][lib]["seconds"] for lib in ("ours", "straw")}
    rows.append(f"| reopen time, 100x over 1x | {grow['ours']:.2f}x | {grow['straw']:.2f}x | - |")
    return "\n".join(rows)


def _notes(report: Report, syncs: dict, hist: str | None) -> None:
    report.note("what each step maps to: take = submit_tasks with the producer's state (the loader's "
                "cursor); admit(rollouts=4) = acquire (a lease); " + ("progress = publish the prefix + "
                "save_task_progress; " if PROGRESS else "") + "the 4 seals, the last with finished = "
                "publish the 4 rollouts + complete_task (one result); trained = publish the consumer's "
                "state + save_consumer_state('training')")
    if not PROGRESS:
        report.note(f"{WITHOUT_PROGRESS}: neither side runs the progress step (straw's "
                    "save_task_progress is left out too, so both run the same lifecycle)")
    report.note("not like for like: straw stores every payload and publishes a record for each result "
                "and consumer state (records of no bytes without payloads), ours journals locators; "
                "straw runs multi-host machinery on every step (leases with epochs and tokens, receipts, "
                "writer incarnations, publication staging), ours one writer per journal; straw completes "
                "a group as one result, ours seals each rollout on its own; straw's tasks carry no input "
                "here (slime publishes each prompt group as its input)")
    report.note("reopen: straw replays its whole log at its head (no journal compaction in 0.1.6; its "
                "online GC, off by default in slime, reclaims only sealed packs), ours restores its newest "
                f"checkpoint (a checkpoint every {STEP_GROUPS} groups of the history, compaction every 10) "
                "and continues the journal; each reopen in a fresh process; histories without payloads, "
                f"written under {hist or 'the system temp dir'}")
    if syncs.get("strace") is None:
        report.note("strace is not installed: straw's syncs, and the data plane's, are not counted")
    else:
        report.note(f"syncs traced: `strace -f` of a child running {WARMUP_GROUPS} warm-up groups, then "
                    "the counted ones between two chdir markers; every thread's fsync, fdatasync, "
                    "sync_file_range, syncfs and msync")


def run(args) -> Report:
    straw = straw_version()
    if straw is None:
        print(MISSING, file=sys.stderr)
        raise SystemExit(2)
    quick = args.quick
    seconds = args.seconds or (0.4 if quick else 2.0)
    rounds = args.rounds or (2 if quick else 5)
    base = args.history or (10 if quick else 200)
    sync_groups = args.sync_groups or (10 if quick else 100)
    concurrency = sorted({1, *(int(x) for x in str(args.concurrency).split(",") if x.strip())})
    parent = os.path.abspath(args.dir) if args.dir else None
    if parent:
        os.makedirs(parent, exist_ok=True)
    hist = history_dir(args)
    report = Report("peers", quick=quick, directory=parent)
    label = f"straw-queue {straw}"
    if straw != STRAW_VERSION:
        report.note(f"straw-queue {straw} is installed; the lifecycle follows {STRAW_VERSION}'s API")
    log(f"bench peers: {label}; {rounds} rounds x {seconds:g} s per lifecycle; "
        + ("with progress" if PROGRESS else WITHOUT_PROGRESS))

    r = Rounds()
    totals: dict = {}
    for i in range(rounds):
        for n in concurrency:
            measure_round(parent, seconds, n, r, totals)
            c = "" if n == 1 else f"c{n}_"
            log(f"round {i + 1}/{rounds}, {n} in flight: groups/s ours {r.samples[c + 'ours'][-1]:,.0f}, straw "
                f"{r.samples[c + 'straw'][-1]:,.0f}, sqlite {r.samples[c + 'sqlite'][-1]:,.0f}; with payloads "
                f"ours {r.samples[c + 'ours_payload'][-1]:,.0f}, straw {r.samples[c + 'straw_payload'][-1]:,.0f}")
    log(f"syncs: at least {sync_groups} groups per traced child")
    syncs: dict = {}
    for n in concurrency:
        measure_syncs(parent, sync_groups, n, syncs)
    log(f"reopen after histories of {base:,}, {10 * base:,} and {100 * base:,} groups, under {hist}")
    reopens = measure_reopens(hist, base, 1 if quick else 3)
    torch, _ = run_child(_child("torch", "-", "-"))

    _throughput_figures(report, r, label)
    for n in concurrency[1:]:
        _concurrency_figures(report, r, n, label)
    _sync_figures(report, r, syncs, label)
    _bytes_figures(report, r, totals, label)
    _reopen_figures(report, reopens, torch, label)
    report.tables.append(_table(r, totals, syncs, reopens, label))
    report.tables.append(_concurrency_table(r, concurrency, syncs, label))
    _notes(report, syncs, hist)
    report.meta.update(straw_version=straw, progress=PROGRESS, seconds_per_lifecycle=seconds, rounds=rounds,
                       history_groups=base, history_dir=hist, sync_groups=sync_groups, concurrency=concurrency,
                       transitions_per_group=TRANSITIONS, lifecycle=LIFECYCLE, totals=totals, syncs=syncs,
                       reopens=reopens, torch_import=torch)
    return report
