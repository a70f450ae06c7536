"""`python -m bench ray`: the example trainer's Ray mode, journal on vs off, and what each kind
of kill costs with rollout-level recovery, group-level and the baseline without a journal.

One Ray cluster for the whole run (`examples.ray_workers.start_cluster`: a head and two worker
nodes on this machine, loopback only), stopped at the end. The trainer's rollout workers are
Ray actors there (`--ray`); the trainer is the driver and the journal's one writer.

Figures:

1. rollouts per second through the controller, journal on (`--ray`, rollout-level: every
   rollout sealed in the journal) against journal off (`--ray --no-journal`: the same loop,
   rollouts tracked, retried and fenced in memory only), no kills, the same cluster, seed and
   workload. Runs alternate (on/off, then off/on, ...); a run's rate is the rollouts of its
   trained steps after the first over the time between the first and the last step (Python,
   torch and Ray start-up left out). Target: median of the per-round ratios >= 0.95.
2. per kill kind (actor: single actors killed; node: a worker node removed, a fresh one
   joins; controller: the trainer SIGKILLed), the same seed and kill plan for the three
   modes (`journal-demo --ray --kill-kinds KIND`): rollout-level (default) vs group-level
   (`--group-level`) vs the baseline (`--baseline`: no journal, group-level). Rollout failures
   and slow workers are off, so what is regenerated or thrown away is the kills' doing (and
   deadlines a loaded machine misses):
   - rollouts regenerated: rollouts the workers started beyond one per rollout of every
     prompt the final history trained (restores' handed-back rollouts, retries of rollouts
     given up with their actor, the replacements of discarded groups, retrained steps);
   - generation-seconds lost: the simulated generation time of completed rollouts the final
     history did not train (a rollout in flight at a kill is not counted);
   - prompts trained twice or lost: 0 with the journal (target), what the baseline got wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

from .common import Figure, Report, Target, log, scratch_dir

MODES = ("rollout", "group", "baseline")
MODE_TEXT = {"rollout": "rollout-level", "group": "group-level", "baseline": "baseline (no journal)"}
KINDS = ("actor", "node", "controller")
KIND_TEXT = {"actor": "actor kills", "node": "node removals", "controller": "controller SIGKILLs"}
MIN_RATIO = 0.95
SEED = 3
# the throughput runs: many generator tasks on short rollouts, so the controller is busy
THROUGHPUT = {"quick": {"dataset_size": 256, "batch_size": 16, "rollouts": 8, "rounds": 3},
              "full": {"dataset_size": 768, "batch_size": 16, "rollouts": 8, "rounds": 5}}
WORKERS = 24
THROUGHPUT_ENGINE = ["--workers", str(WORKERS), "--ray-actors", "3", "--latency-ms", "10", "--ckpt-every", "4"]
# the kill runs: per kind, how many of it
KILLS = {"quick": {"dataset_size": 128, "batch_size": 8, "rollouts": 4, "actor": 4, "node": 1, "controller": 2},
         "full": {"dataset_size": 384, "batch_size": 8, "rollouts": 8, "actor": 10, "node": 2, "controller": 5}}
KILL_ENGINE = {"workers": 8, "ckpt_every": 3, "failure_rate": 0.0,
               "trainer_args": ["--ray-actors", "3", "--latency-ms", "30", "--slow-rate", "0"]}
RUN_TIMEOUT = 900.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed of every run (default {SEED})")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="kill kinds to measure, comma-separated (default actor,node,controller)")
    parser.add_argument("--skip-throughput", action="store_true", help="only the kill runs")


# -- 1. throughput, journal on vs off ----------------------------------------------------------


def _throughput_run(address: str, out: str, journal: bool, params: dict, seed: int) -> dict:
    """One trainer run without kills: `rate`, rollouts per second between its first and last
    step; `seal_wait_ms`, what a seal waited for the group's lock and the commit (its DONE
    line's counters);
    `task_ms`, a generator task's time per rollout at that rate."""
    from examples import chaos
    cmd = [sys.executable, "-m", "examples.trainer", "--out", out, "--ray", "--ray-address", address,
           "--seed", str(seed), "--epochs", "1", "--dataset-size", str(params["dataset_size"]),
           "--batch-size", str(params["batch_size"]), "--rollouts", str(params["rollouts"]),
           "--deadline-ms", str(chaos.RAY_DEADLINE_MS), *THROUGHPUT_ENGINE]
    if not journal:
        cmd.append("--no-journal")
    os.makedirs(out)
    stderr = os.path.join(out, "trainer-stderr.log")
    child = chaos.Child(cmd, stderr)
    steps: list[tuple[float, int]] = []   # (when it was announced, groups trained)
    done: dict[str, str] = {}
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while (line := child.lines.get(timeout=max(1.0, deadline - time.monotonic()))) is not None:
            if line.startswith("STEP "):
                groups = int(line.split("groups=")[1].split()[0])
                steps.append((time.monotonic(), groups))
            elif line.startswith("DONE "):
                done = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
    finally:
        child.stop()
    rc = child.proc.returncode
    if rc != 0 or len(steps) < 3 or "seals" not in done:
        with open(stderr, errors="replace") as f:
            tail = "".join(f.readlines()[-20:])
        raise RuntimeError(f"bench ray: the trainer in {out} exited with status {rc} after "
                           f"{len(steps)} steps; the end of {stderr}:\n{tail}")
    rate = sum(g for _, g in steps[1:]) * params["rollouts"] / (steps[-1][0] - steps[0][0])
    return {"rate": rate, "seal_wait_ms": int(done["seal_wait_us"]) / int(done["seals"]) / 1e3,
            "task_ms": 1e3 * WORKERS / rate}


def _throughput(report: Report, address: str, directory: str, quick: bool, seed: int) -> None:
    params = THROUGHPUT["quick" if quick else "full"]
    runs = {"on": [], "off": []}
    for r in range(params["rounds"]):
        for journal in ((True, False) if r % 2 == 0 else (False, True)):
            name = "on" if journal else "off"
            got = _throughput_run(address, os.path.join(directory, f"tp-{r}-{name}"), journal, params, seed)
            runs[name].append(got)
            log(f"bench ray: round {r}, journal {name}: {got['rate']:.0f} rollouts/s, "
                f"{got['seal_wait_ms']:.2f} ms wait per seal")
    on, off = [g["rate"] for g in runs["on"]], [g["rate"] for g in runs["off"]]
    ratios = [a / b for a, b in zip(on, off)]
    report.meta["throughput"] = {**params, "engine": THROUGHPUT_ENGINE}
    report.add(Figure(
        "throughput_ratio", "Ray mode, rollouts/s through the controller, journal on / off (median "
        "of the rounds' ratios)", statistics.median(ratios), "x", target=Target(min_value=MIN_RATIO),
        samples=ratios,
        note=f"{params['rounds']} rounds, alternating; {params['dataset_size']} prompts x "
             f"{params['rollouts']} rollouts per run, " + " ".join(THROUGHPUT_ENGINE)))
    report.add(Figure(
        "throughput", "Ray mode, rollouts/s through the controller, journal on (median)",
        statistics.median(on), "rollouts/s", reference=statistics.median(off),
        reference_label="--no-journal, the same loop, median", samples=on, reference_samples=off))
    waits = [g["seal_wait_ms"] for g in runs["on"]]
    report.add(Figure(
        "seal_wait", "journal on: a seal's wait (group lock + commit), median",
        statistics.median(waits), "ms", reference=statistics.median(g["task_ms"] for g in runs["on"]),
        reference_label="a generator task's time per rollout, journal on", samples=waits,
        note=f"journal off the same wait (the lock, a no-op seal) is "
             f"{statistics.median(g['seal_wait_ms'] for g in runs['off']):.3f} ms. A generator task hands "
             "the answer to a task of its own that seals it and takes its next rollout meanwhile, so the "
             "wait holds no actor idle; the group trains once every seal is durable"))


# -- 2. per kill kind: rollout-level vs group-level vs the baseline ---------------------------


def _kill_run(cluster, directory: str, kind: str, mode: str, params: dict, seed: int) -> dict:
    from examples import chaos
    o = chaos.Options(out=os.path.join(directory, f"{kind}-{mode}"), seed=seed, epochs=1,
                      dataset_size=params["dataset_size"], batch_size=params["batch_size"],
                      rollouts=params["rollouts"], ray=True, kill_kinds=(kind,),
                      kills=params["controller"], actor_kills=params["actor"], node_kills=params["node"],
                      baseline=mode == "baseline", group_level=mode == "group", verbose=False,
                      timeout=RUN_TIMEOUT, **KILL_ENGINE)
    s = chaos.run(o, cluster=cluster)
    return _costs(s, params["rollouts"])


def _costs(s: dict, rollouts: int) -> dict:
    """What one journal-demo run's kills cost (see the module docstring)."""
    a = s["audit"]
    started = s["ledger"]["counters"].get("rollouts_started", 0)
    trained = a["trained_once"] + a["trained_twice"]
    return {"regenerated": started - rollouts * trained, "rollouts_started": started,
            "generation_lost": (s["ledger"]["counters"].get("generation_us", 0)
                                - s["ledger"]["used_generation_us"]) / 1e6,
            "twice": s["twice"], "lost": s["lost"], "dropped": a["dropped"],
            "restore_regenerated": s["regenerated_rollouts"], "salvaged_rollouts": s["salvaged_rollouts"],
            "controller_kills": s["kills"], **s["ray"], "fenced_late_results": s["fenced_late_results"],
            "late_results_ignored": s["late_results_ignored"], "restores": s["restores"],
            "wall_seconds": s["wall_seconds"], "ok": s["ok"]}


def _kill_figures(report: Report, kind: str, c: dict) -> None:
    r, g, b = c["rollout"], c["group"], c["baseline"]
    what = KIND_TEXT[kind]
    for mode, label in (("rollout", "rollout-level"), ("baseline", "baseline (no journal)")):
        report.add(Figure(f"{kind}_regenerated_{mode}", f"{what}: rollouts regenerated, {label}",
                          c[mode]["regenerated"], "rollouts", reference=g["regenerated"],
                          reference_label="group-level, same seed and kills",
                          note=f"of them handed back by restores: {c[mode]['restore_regenerated']} "
                               f"({g['restore_regenerated']} group-level)" if kind == "controller" else ""))
    for mode, label in (("rollout", "rollout-level"), ("baseline", "baseline (no journal)")):
        report.add(Figure(f"{kind}_generation_lost_{mode}", f"{what}: generation-seconds lost, {label}",
                          c[mode]["generation_lost"], "s", reference=g["generation_lost"],
                          reference_label="group-level"))
    report.add(Figure(f"{kind}_baseline_wrong", f"{what}: prompts trained twice / lost, baseline",
                      b["twice"] + b["lost"], "prompts", note=f"{b['twice']} twice, {b['lost']} lost"))
    report.add(Figure(f"{kind}_exactly_once", f"{what}: prompts trained twice or lost, journal modes",
                      r["twice"] + r["lost"] + g["twice"] + g["lost"], "prompts", target=Target(max_value=0),
                      note="kills per mode (actors killed / nodes replaced / controller SIGKILLs): " + "; ".join(
                          f"{m} {c[m]['actors_killed']}/{c[m]['nodes_replaced']}/{c[m]['controller_kills']}, "
                          f"{c[m]['dropped']} prompts dropped" for m in MODES)))


def _kill_costs(report: Report, cluster, directory: str, quick: bool, seed: int, kinds) -> None:
    params = KILLS["quick" if quick else "full"]
    report.meta["kills"] = {**params, "engine": KILL_ENGINE, "by_kind": {}}
    for kind in kinds:
        c = {}
        for mode in MODES:
            c[mode] = _kill_run(cluster, directory, kind, mode, params, seed)
            log(f"bench ray: {KIND_TEXT[kind]}, {MODE_TEXT[mode]}: {c[mode]['regenerated']} rollouts "
                f"regenerated, {c[mode]['generation_lost']:.2f} s generation lost, "
                f"{c[mode]['twice']} twice, {c[mode]['lost']} lost, {c[mode]['wall_seconds']} s")
        report.meta["kills"]["by_kind"][kind] = c
        _kill_figures(report, kind, c)


def run(args) -> Report:
    from examples import ray_workers   # first: Ray binds loopback only
    import ray
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"bench ray: unknown kill kind(s) {', '.join(unknown)}; pick from {', '.join(KINDS)}")
    report = Report("ray", quick=args.quick, directory=args.dir)
    report.meta["seed"] = args.seed
    started = time.monotonic()
    cluster = ray_workers.start_cluster()
    # Ray prints the errors it publishes to the driver (a removed node's raylet died) on
    # stdout, which is the report's: while the cluster is up they go to stderr
    with contextlib.redirect_stdout(sys.stderr):
        try:
            ray.init(address=cluster.address, log_to_driver=False)
            log(f"bench ray: cluster up at {cluster.address} in {time.monotonic() - started:.1f} s")
            with scratch_dir(args.dir, prefix="bench-ray-") as d:
                if not args.skip_throughput:
                    _throughput(report, cluster.address, d, args.quick, args.seed)
                _kill_costs(report, cluster, d, args.quick, args.seed, kinds)
        finally:
            ray.shutdown()
            cluster.shutdown()
    report.note("one Ray cluster for the whole run: a head (no CPUs) and two worker nodes of 2 CPUs, "
                "80 MiB object stores, every process on 127.0.0.1")
    return report
