"""`python -m bench demo`: what the kills of `journal-demo` cost, rollout-level vs group-level,
and with durable prefixes (`rollout_progress`) vs without.

The example trainer (examples/trainer.py) runs under `journal-demo`'s SIGKILLs three times
with the same seed and the same kill plan: rollout-level (groups admitted with `rollouts=8`,
each rollout sealed as it lands in the data plane, failed and late rollouts retried with
the next attempt) with a progress row every PROGRESS_EVERY tokens and every turn of a
multi-turn rollout, the same without progress, and group-level (`--group-level`:
`rollouts=` off, all-or-nothing). All have 8 rollouts per group generated token by token
(long-tailed lengths, plus slow workers that miss their deadline), the way an inference
engine does it: 64 concurrent slots (`--workers 64`), so a group's rollouts run at once and
a group in flight waits on its slowest ones (a median rollout 24 ms, deadline 400 ms: the
demo's throughput, 8 times the slots).

Figures:

1. rollouts regenerated after restores (the pending rollouts of the admitted groups every
   restore hands back), rollout-level beside group-level. Target: at least 3x fewer
   (rollout-level <= group-level / 3).
2. generation-seconds lost per kill, both modes (informational): the generation time of
   rollouts (finished or in flight at the kill) that no surviving history used and the trainer
   did not throw away itself (see examples/chaos.py).
2b. generation-seconds of rollouts in flight at a kill that no restore continued, per kill,
   with progress beside without. Target: at least MIN_PROGRESS_GAIN times less.
3. late results of slow workers: fenced by the journal (rollout-level) beside dropped with
   their discarded group (group-level), informational.
4. prompts trained twice or lost, both modes together. Target: 0.

The two runs are sequential, not interleaved: the seed fixes the dataset, the shuffle and
the kill plan, while rollout latencies, failures and where the kills land by wall clock
differ from run to run, so the counts vary between invocations.
"""

from __future__ import annotations

import argparse
import os

from examples import chaos

from .common import Figure, Report, Target, log, scratch_dir

QUICK = {"dataset_size": 384, "batch_size": 32, "ckpt_every": 3, "kills": 5, "seed": 7}
PROGRESS_EVERY = 16
MIN_PROGRESS_GAIN = 2.0
FULL = {"dataset_size": 2048, "batch_size": 16, "ckpt_every": 4, "kills": 20, "seed": 0}
ROLLOUTS = 8
ENGINE = {"workers": 64, "trainer_args": ["--latency-ms", "24", "--deadline-ms", "400"]}
MIN_FEWER = 3.0
SUMMARY_KEYS = ("kills", "kills_by_phase", "restores", "regenerated_rollouts", "regenerated_groups",
                "salvaged_groups", "salvaged_rollouts", "demoted_groups", "generation_seconds",
                "generation_seconds_lost", "generation_seconds_lost_per_kill", "generation_seconds_wasted",
                "generation_seconds_in_flight_lost", "generation_seconds_in_flight_lost_per_kill",
                "continued_rollouts", "kept_tokens", "progress_every",
                "fenced_late_results", "late_results_ignored", "rollouts_retried", "twice", "lost",
                "wall_seconds")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=None, help="seed of both runs (default 7 quick, 0 full)")
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs per run (default 5 quick, 20 full)")


def _run(directory: str, group_level: bool, progress_every: int, params: dict) -> dict:
    level = "group-level" if group_level else "rollout-level"
    name = level + (f"-progress{progress_every}" if progress_every else "")
    log(f"bench demo: journal-demo {name}, {params['kills']} kills, seed {params['seed']} ...")
    o = chaos.Options(out=os.path.join(directory, name), epochs=2, rollouts=ROLLOUTS, group_level=group_level,
                      progress_every=progress_every, verbose=False, timeout=1800.0, **ENGINE, **params)
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
    with scratch_dir(args.dir, prefix="bench-demo-") as d:
        by = {"progress": _run(d, False, PROGRESS_EVERY, params), "rollout": _run(d, False, 0, params),
              "group": _run(d, True, 0, params)}
    p, r, g = by["progress"], by["rollout"], by["group"]
    report.meta = {"params": params, "rollouts_per_group": ROLLOUTS, "engine": ENGINE,
                   "progress_every": PROGRESS_EVERY,
                   **{level: _summary(s) for level, s in by.items()}}
    report.add(Figure(
        "regenerated_rollouts", "rollouts regenerated after restores, rollout-level",
        r["regenerated_rollouts"], "rollouts", reference=g["regenerated_rollouts"],
        reference_label="group-level, same seed and kill plan",
        target=Target(max_value=g["regenerated_rollouts"] / MIN_FEWER),
        note=f"target: at least {MIN_FEWER:g}x fewer than group-level; {r['restores']} and {g['restores']} "
             f"restores; salvaged rollout-level {r['salvaged_rollouts']} rollouts, group-level "
             f"{g['salvaged_groups']} groups"))
    report.add(Figure(
        "generation_lost_per_kill", "generation-seconds lost per kill, rollout-level",
        r["generation_seconds_lost_per_kill"], "s", reference=g["generation_seconds_lost_per_kill"],
        reference_label="group-level",
        note=f"generation time ({r['generation_seconds']:.1f} s and {g['generation_seconds']:.1f} s "
             f"generated in all; {r['kills']} and {g['kills']} kills); most of it is work on groups taken "
             "after the restored checkpoint, which both modes lose"))
    report.add(Figure(
        "in_flight_lost_per_kill", f"generation-seconds in flight at a kill and lost, per kill, progress "
        f"every {PROGRESS_EVERY} tokens and every turn", p["generation_seconds_in_flight_lost_per_kill"], "s",
        reference=r["generation_seconds_in_flight_lost_per_kill"], reference_label="rollout-level without progress",
        target=Target(min_ratio=MIN_PROGRESS_GAIN), times_less=True,
        note=f"{p['continued_rollouts']} rollouts continued from their prefix ({p['kept_tokens']} tokens kept); "
             f"all generation lost per kill with progress {p['generation_seconds_lost_per_kill']:.3f} s, without "
             f"{r['generation_seconds_lost_per_kill']:.3f} s; {p['twice'] + p['lost']} prompts twice or lost "
             "with progress"))
    report.add(Figure(
        "late_results", "late results fenced by the journal, rollout-level", r["fenced_late_results"],
        "results", reference=g["late_results_ignored"],
        reference_label="dropped with their discarded group, group-level"))
    report.add(Figure(
        "exactly_once", "prompts trained twice or lost, all three runs",
        sum(s["twice"] + s["lost"] for s in (p, r, g)),
        "prompts", target=Target(max_value=0)))
    return report
