"""`python -m bench restart`: a restart costs the same after a month of history as after a minute.

Workload (`build`): N groups, each taken (a loader state holding a 5 KB generator tensor, as
StatefulDataLoader's, stored once per segment as a blob), admitted with rollouts=8, its 8
rollouts sealed (a data-plane locator each), finished and trained; BATCH groups per commit of
each kind (built fast: a commit names many groups), a committed checkpoint every BATCH groups
and a cut at one every tenth of the history (`compact` at its checkpoint_begun, from the live
writer's state; retention archives what the cuts cover). Then the same end for every N: LIVE groups in flight (admitted, half their rollouts
sealed), a committed checkpoint and its cut, and a tail of TAIL groups taken after it (the work a
crash would lose).

Two layouts: the whole history in ONE segment (`segment_bytes` above its size: nothing rotates,
so no cut retires anything and the newest cut sits near the end of a segment as large as the
history), and ROTATED segments of ROTATED_SEGMENT_BYTES (the cuts' retention archives the older
ones).

Measured: in a fresh process that imports torch first (as a trainer has), `replay.restore(path)`
then `Journal.open(path, resume=state)` (each round on a fresh copy of the journal: the open
continues it); their sum after 1x, 10x and 100x as much history (N = base, 10 base, 100 base),
beside the 1x figure as a ratio. Targets: 100x over 1x <= 1.2 in both layouts, and restore +
open of the 100x journal (1,000,000 groups x 8 rollouts in the full run) <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from .common import Figure, Report, Rounds, Target, log, scratch_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLLOUTS = 8
BATCH = 1_000
LIVE = 1_000
TAIL = 1_000
ONE_SEGMENT_BYTES = 4 << 30
ROTATED_SEGMENT_BYTES = 1 << 20
LAYOUTS = {"1seg": ONE_SEGMENT_BYTES, "rotated": ROTATED_SEGMENT_BYTES}
SCALES = (1, 10, 100)
RATIO_TARGET = 1.2
SECONDS_TARGET = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=None,
                        help="fresh-process restarts per journal, medians reported (default 5 quick, 7 full)")
    parser.add_argument("--base", type=int, default=None,
                        help="groups of history at 1x (default 1,000 quick, 10,000 full: 100x is "
                             "1,000,000 groups x 8 rollouts)")


# -- building journals ---------------------------------------------------------------------------

def _loader_state(taken: int, torch) -> dict:
    return {"_num_yielded": taken, "_sampler_iter_state": {
        "samples_yielded": taken, "generator": torch.arange(5056, dtype=torch.int64).to(torch.uint8)}}


def _batch(j, first_idx: int, n: int, step: int, torch, *, sealed: int = ROLLOUTS, done: bool = True) -> list[int]:
    """Take `n` groups, admit them with rollouts=8 and seal `sealed` rollouts of each; with
    `done`, finish and train them at `step`."""
    from journal import GroupRef, RolloutRef

    gids = j.taken([GroupRef(idx=first_idx + i) for i in range(n)],
                   loader_state=_loader_state(first_idx + n, torch))
    j.admitted(gids, target_step=step, policy_version=step - 1, rollouts=ROLLOUTS)
    if sealed:
        j.rollout_sealed([RolloutRef(g, k, 0, f"dp/{g}/{k}") for g in gids for k in range(sealed)],
                         policy_version=step - 1)
    if done:
        j.finished(gids, policy_version=step - 1)
        j.trained(gids, step=step)
    return gids


def _checkpoint(j, path: str, step: int, *, cut: bool) -> None:
    """Checkpoint `step`; with `cut`, a cut at its checkpoint_begun (the trainer's state at the
    checkpoint, the point a restore lands on) before it is committed."""
    from snapshot import compact

    j.begin_checkpoint(step=step)
    if cut:
        compact(path, "end", journal=j)
    j.commit_checkpoint(step=step)


def build(path: str, groups: int, segment_bytes: int) -> float:
    """The workload of the module docstring at `path`; returns the seconds it took."""
    import torch

    from journal import Journal

    t0 = time.perf_counter()
    every = max(BATCH, groups // 10 // BATCH * BATCH)
    with Journal.open(path, sync="none", segment_bytes=segment_bytes) as j:
        step = 1
        for start in range(0, groups, BATCH):
            _batch(j, start, min(BATCH, groups - start), step, torch)
            _checkpoint(j, path, step, cut=(start + BATCH) % every == 0)
            step += 1
        _batch(j, groups, LIVE, step, torch, sealed=ROLLOUTS // 2, done=False)
        _checkpoint(j, path, step, cut=True)
        _batch(j, groups + LIVE, TAIL, step + 1, torch, sealed=ROLLOUTS // 2, done=False)
    return time.perf_counter() - t0


# -- one restart in a fresh process ----------------------------------------------------------------

def restart(path: str) -> dict:
    """Restore and resume the journal at `path` (this process has imported torch already)."""
    import warnings

    from journal import Journal
    from replay import restore

    warnings.simplefilter("ignore")
    c0, t0 = time.process_time(), time.perf_counter()
    state = restore(path)
    t1 = time.perf_counter()
    with Journal.open(path, resume=state) as j:
        t2, c2 = time.perf_counter(), time.process_time()
        lsn = j.lsn
    return {"restore": t1 - t0, "open": t2 - t1, "cpu": c2 - c0, "lsn": lsn,
            "admitted": len(state.admitted), "base_cut": os.path.basename(state.base_cut or "")}


def _child_main(path: str) -> None:
    import torch  # noqa: F401  (a trainer has imported it before it restarts)

    print(json.dumps(restart(path)))


def run_restart(journal: str, scratch: str) -> dict:
    """One restart of a fresh copy of `journal`, in a fresh process."""
    copy = os.path.join(scratch, "restart-copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(journal, copy)
    try:
        p = subprocess.run([sys.executable, "-m", "bench.restart", copy], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"restart child exited {p.returncode}: {p.stderr[-2000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# -- the benchmark -----------------------------------------------------------------------------

def run(args) -> Report:
    quick = args.quick
    rounds = args.rounds or (5 if quick else 7)
    base = args.base or (1_000 if quick else 10_000)
    parent = os.path.abspath(args.dir) if args.dir else None
    report = Report("restart", quick=quick, directory=parent)
    if parent:
        os.makedirs(parent, exist_ok=True)
    report.meta.update(rounds=rounds, base=base, rollouts=ROLLOUTS, batch=BATCH, live=LIVE, tail=TAIL,
                       layouts={k: v for k, v in LAYOUTS.items()})
    with scratch_dir(parent, "bench-restart-") as root:
        journals, built = {}, {}
        for layout, segment_bytes in LAYOUTS.items():
            for k in SCALES:
                groups = k * base
                path = journals[layout, k] = os.path.join(root, f"{layout}-{k}x")
                log(f"building {layout}: {groups:,} groups x {ROLLOUTS} rollouts")
                seconds = build(path, groups, segment_bytes)
                segs = [n for n in os.listdir(path) if ".wal" in n]
                built[layout, k] = {"groups": groups, "seconds": seconds, "bytes": _bytes(path),
                                    "segments": len(segs), "live_segments": sum(n.endswith(".wal") for n in segs)}
                log(f"  {seconds:.1f} s, {built[layout, k]['bytes'] / 1e6:.0f} MB, {len(segs)} segment files")
        r = Rounds()
        runs: dict = {}
        for i in range(rounds):
            log(f"round {i + 1}/{rounds}")
            order = SCALES[i % len(SCALES):] + SCALES[:i % len(SCALES)]  # each size first in turn
            for layout in LAYOUTS:
                for k in order:
                    got = run_restart(journals[layout, k], root)
                    runs.setdefault(f"{layout}-{k}x", []).append(got)
                    r.add(f"{layout}{k}", got["restore"] + got["open"])
                    r.add(f"{layout}{k}_restore", got["restore"])
                    r.add(f"{layout}{k}_open", got["open"])
                    r.add(f"{layout}{k}_cpu", got["cpu"])
            log("  " + "  ".join(f"{layout}: " + ", ".join(
                f"{k}x {1e3 * r.samples[f'{layout}{k}'][-1]:.0f} ms" for k in SCALES) for layout in LAYOUTS))
        for layout in LAYOUTS:
            for k in SCALES[1:]:
                last = k == SCALES[-1]
                f = report.add(r.figure(
                    f"restart_{layout}_{k}x",
                    f"restore + Journal.open(resume=), {layout_label(layout)}, after {k}x history "
                    f"({k * base:,} groups x {ROLLOUTS} rollouts)", "s", value=f"{layout}{k}",
                    reference=f"{layout}1", reference_label=f"same after 1x ({base:,} groups)",
                    target=Target(max_ratio=RATIO_TARGET) if last else None))
                f.note = (f"restore {1e3 * r.median(f'{layout}{k}_restore'):.0f} ms + open "
                          f"{1e3 * r.median(f'{layout}{k}_open'):.0f} ms after {k}x vs restore "
                          f"{1e3 * r.median(f'{layout}1_restore'):.0f} ms + open "
                          f"{1e3 * r.median(f'{layout}1_open'):.0f} ms after 1x")
                report.add(r.figure(
                    f"restart_{layout}_{k}x_cpu", f"the same, CPU time of the restarting process, "
                    f"{layout_label(layout)}, after {k}x history", "s", value=f"{layout}{k}_cpu",
                    reference=f"{layout}1_cpu", reference_label="same after 1x",
                    note="informational: what a loaded machine's scheduling adds to wall time is "
                         "left out (the open's fsyncs too)"))
        top = SCALES[-1]
        for layout in LAYOUTS:
            b = built[layout, top]
            f = report.add(Figure(
                f"restart_{layout}_{top}x_seconds",
                f"restore + open of {b['groups']:,} finished groups x {ROLLOUTS} rollouts with its newest "
                f"cut, {layout_label(layout)}", r.median(f"{layout}{top}"), "s",
                target=Target(max_value=SECONDS_TARGET), samples=list(r.samples[f"{layout}{top}"])))
            f.note = (f"built in {b['seconds']:.0f} s ({b['bytes'] / 1e6:.0f} MB, {b['segments']} segment "
                      f"files, {b['live_segments']} live)")
        report.meta["built"] = {f"{layout}-{k}x": v for (layout, k), v in built.items()}
        report.meta["runs"] = runs
    report.note("each restart in a fresh process that imported torch first, on a fresh copy of the "
                "journal (the open continues it); the journal and its cuts are in the page cache")
    report.note(f"every history ends alike: {LIVE:,} groups in flight at the last checkpoint (4 of 8 "
                f"rollouts sealed: the restore fences the others), its cut, {TAIL:,} groups taken after it")
    return report


def layout_label(layout: str) -> str:
    return ("one segment (nothing rotated)" if layout == "1seg"
            else f"rotated {ROTATED_SEGMENT_BYTES >> 20} MiB segments")


if __name__ == "__main__":  # the restart child: python -m bench.restart JOURNAL
    _child_main(sys.argv[1])
