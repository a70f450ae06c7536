"""`python -m bench demo`: what the kills of `journal-demo` cost, rollout-level vs group-level,
with durable prefixes (`rollout_progress`) vs without, and with the trainer's lag bound vs without.

The example trainer (examples/trainer.py) runs under `journal-demo`'s SIGKILLs four times
with the same seed and the same kill plan, three of them with `--max-policy-lag` set to the
checkpoint interval (each restore keeps the work of every weights the crash lost, DESIGN 14):
rollout-level (groups admitted with `rollouts=8`, each rollout sealed as it lands in the data
plane, failed and late rollouts retried with the next attempt) with a progress row every
PROGRESS_EVERY tokens and every turn of a multi-turn rollout, the same without progress, and
group-level (`--group-level`: `rollouts=` off, all-or-nothing); the fourth is rollout-level
without progress and without the bound (today's rule: nothing newer than the checkpoint is
kept). All have 8 rollouts per group generated token by token
(long-tailed lengths, plus slow workers that miss their deadline), the way an inference
engine does it: 64 concurrent slots (`--workers 64`), so a group's rollouts run at once and
a group in flight waits on its slowest ones (a median rollout 24 ms, deadline 400 ms: the
demo's throughput, 8 times the slots).

Figures:

1. rollouts regenerated after restores (the pending rollouts of the admitted groups every
   restore hands back), rollout-level beside group-level, both with the lag bound. Target: at
   least 3x fewer (rollout-level <= group-level / 3). Beside it (informational) the same
   rollout-level run without the bound.
2. generation-seconds lost per kill, both modes (informational): the generation time of
   rollouts (finished or in flight at the kill) that no surviving history used and the trainer
   did not throw away itself (see examples/chaos.py).
3. generation-seconds lost per kill with progress beside without (informational), all of
   it and the part in rollouts in flight at a kill that no restore continued, with the
   rollouts restores continued from a prefix (with the bound, those of weights that died
   too); `python -m bench recovery` has the figure on calibrated long-rollout shapes.
4. late results of slow workers: fenced by the journal (rollout-level) beside dropped with
   their discarded group (group-level), informational.
5. prompts trained twice or lost, all three runs. Target: 0.

The runs are sequential, not interleaved: the seed fixes the dataset, the shuffle and
the kill plan, while rollout latencies, failures and where the kills land by wall clock
differ from run to run, so the counts vary between invocations.
"""

from __future__ import annotations

import argparse
import os

from examples import chaos

from .common import Figure, Report, Target, log, scratch_dir

QUICK = {"dataset_size": 384, "batch_size": 32, "ckpt_every": 3, "kills": 5, "seed": 7}   # lag bound: ckpt_every
PROGRESS_EVERY = 16
FULL = {"dataset_size": 2048, "batch_size": 16, "ckpt_every": 4, "kills": 20, "seed": 0}
ROLLOUTS = 8
ENGINE = {"workers": 64, "trainer_args": ["--latency-ms", "24", "--deadline-ms", "400"]}
MIN_FEWER = 3.0
SUMMARY_KEYS = ("kills", "kills_by_phase", "restores", "regenerated_rollouts", "regenerated_groups",
                "salvaged_groups", "salvaged_rollouts", "demoted_groups", "generation_seconds",
                "generation_seconds_lost", "generation_seconds_lost_per_kill", "generation_seconds_wasted",
                "generation_seconds_in_flight_lost", "generation_seconds_in_flight_lost_per_kill",
                "continued_rollouts", "kept_tokens", "progress_every", "max_policy_lag", "kept_newer_rollouts",
                "kept_newer_prefixes", "kept_newer_groups",
                "fenced_late_results", "late_results_ignored", "rollouts_retried", "twice", "lost",
                "wall_seconds")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=None, help="seed of both runs (default 7 quick, 0 full)")
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs per run (default 5 quick, 20 full)")


def _run(directory: str, group_level: bool, progress_every: int, max_policy_lag: int, params: dict) -> dict:
    level = "group-level" if group_level else "rollout-level"
    name = level + (f"-progress{progress_every}" if progress_every else "") + f"-lag{max_policy_lag}"
    log(f"bench demo: journal-demo {name}, {params['kills']} kills, seed {params['seed']} ...")
    o = chaos.Options(out=os.path.join(directory, name), epochs=2, rollouts=ROLLOUTS, group_level=group_level,
                      progress_every=progress_every, max_policy_lag=max_policy_lag, verbose=False,
                      timeout=1800.0, **ENGINE, **params)
    s = chaos.run(o)
    log(f"  {name}: {s['kills']} kills, {s['regenerated_rollouts']} rollouts regenerated, "
        f"{s['generation_seconds_lost']:.2f} s generation lost ({s['generation_seconds_in_flight_lost']:.2f} s "
        f"in flight), {s['wall_seconds']} s")
    return s


def _summary(s: dict) -> dict:
    """What a journal-demo run reported, for the JSON document."""
    return {**{k: s[k] for k in SUMMARY_KEYS},
            "trained_once": s["audit"]["trained_once"], "dropped": s["audit"]["dropped"]}


def run(args) -> Report:
    params = dict(QUICK if args.quick else FULL)
    if args.seed is not None:
        params["seed"] = args.seed
    if args.kills is not None:
        params["kills"] = args.kills
    report = Report("demo", quick=args.quick, directory=args.dir)
    lag = params["ckpt_every"]   # every weights a crash can lose
    with scratch_dir(args.dir, prefix="bench-demo-") as d:
        by = {"progress": _run(d, False, PROGRESS_EVERY, lag, params), "rollout": _run(d, False, 0, lag, params),
              "group": _run(d, True, 0, lag, params), "rollout_no_lag": _run(d, False, 0, 0, params)}
    p, r, g, today = by["progress"], by["rollout"], by["group"], by["rollout_no_lag"]
    report.meta = {"params": params, "rollouts_per_group": ROLLOUTS, "engine": ENGINE,
                   "progress_every": PROGRESS_EVERY, "max_policy_lag": lag,
                   **{level: _summary(s) for level, s in by.items()}}
    report.add(Figure(
        "regenerated_rollouts", f"rollouts regenerated after restores, rollout-level, --max-policy-lag {lag}",
        r["regenerated_rollouts"], "rollouts", reference=g["regenerated_rollouts"],
        reference_label=f"group-level, --max-policy-lag {lag}, same seed and kill plan",
        target=Target(max_value=g["regenerated_rollouts"] / MIN_FEWER),
        note=f"target: at least {MIN_FEWER:g}x fewer than group-level; {r['restores']} and {g['restores']} "
             f"restores; salvaged rollout-level {r['salvaged_rollouts']} rollouts, group-level "
             f"{g['salvaged_groups']} groups; of weights newer than the checkpoint kept: rollout-level "
             f"{r['kept_newer_rollouts']} rollouts, group-level {g['kept_newer_groups']} groups"))
    report.add(Figure(
        "regenerated_rollouts_vs_no_lag", f"rollouts regenerated after restores, rollout-level, --max-policy-lag {lag} vs 0",
        r["regenerated_rollouts"], "rollouts", reference=today["regenerated_rollouts"],
        reference_label="the same without the bound (nothing newer than the checkpoint kept)",
        note=f"{r['restores']} and {today['restores']} restores"))
    report.add(Figure(
        "generation_lost_per_kill", f"generation-seconds lost per kill, rollout-level, --max-policy-lag {lag}",
        r["generation_seconds_lost_per_kill"], "s", reference=g["generation_seconds_lost_per_kill"],
        reference_label=f"group-level, --max-policy-lag {lag}",
        note=f"generation time ({r['generation_seconds']:.1f} s and {g['generation_seconds']:.1f} s "
             f"generated in all; {r['kills']} and {g['kills']} kills); without the bound, rollout-level "
             f"{today['generation_seconds_lost_per_kill']:.3g} s per kill"))
    progress = f"progress every {PROGRESS_EVERY} tokens and every turn"
    report.add(Figure(
        "progress_lost_per_kill", f"generation-seconds lost per kill, rollout-level, {progress}",
        p["generation_seconds_lost_per_kill"], "s", reference=r["generation_seconds_lost_per_kill"],
        reference_label="without progress, same seed and kill plan",
        note=f"{p['continued_rollouts']} rollouts continued from their prefix ({p['kept_tokens']} tokens "
             f"kept; {p['kept_newer_prefixes']} prefixes of weights newer than the checkpoint); "
             f"{p['generation_seconds']:.1f} s and {r['generation_seconds']:.1f} s generated in all; "
             f"{p['kills']} and {r['kills']} kills"))
    report.add(Figure(
        "progress_in_flight_lost_per_kill", f"of it in rollouts in flight at a kill, {progress}",
        p["generation_seconds_in_flight_lost_per_kill"], "s",
        reference=r["generation_seconds_in_flight_lost_per_kill"], reference_label="without progress",
        note=f"a restore continues the prefixes of weights up to --max-policy-lag {lag} steps newer than its "
             "checkpoint"))
    report.add(Figure(
        "late_results", "late results fenced by the journal, rollout-level", r["fenced_late_results"],
        "results", reference=g["late_results_ignored"],
        reference_label="dropped with their discarded group, group-level"))
    report.add(Figure(
        "exactly_once", "prompts trained twice or lost, all four runs",
        sum(s["twice"] + s["lost"] for s in by.values()),
        "prompts", target=Target(max_value=0)))
    return report
