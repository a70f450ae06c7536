"""`python -m bench recovery`: generation-seconds lost per crash, every recovery policy on the same run.

One seeded run of an asynchronous GRPO trainer on a virtual clock (`recovery_workload.py`), one
seeded schedule of crashes, and at each crash every policy (`recovery_policies.py`, which says
what each one models and quotes where its rule comes from) decides what comes back: the
generation-seconds lost, the prompts lost, the prompts trained twice. The policies: the loader
position only (most frameworks); NeMo-RL's ledger, saved with the checkpoints; Megatron-LM's
rollout bank (one durable record per finished group); per-rollout seals (this library today,
through a real `Journal` and `replay.restore`); per-rollout seals plus `rollout_progress` every
K tokens (DESIGN 12; measured only when `journal.Journal` has it, else its rows say so and its
targets print NOT RUN). A checkpoint every `--save-period` steps (default 5) for all of them.

**Generation-seconds lost per crash**, one accounting for every policy (the verl RFC's): the
generation time spent before the crash on groups not trained at the crash that the resumed run
must spend again: everything their rollouts generated (a rollout in flight: up to the crash)
minus what the policy hands back (sealed rows, banked groups, a kept prefix). The work of groups
trained between the checkpoint and the crash is counted apart ("retraining after the
checkpoint": the restored weights redo those steps, which the RFC prices in the step clock).

**Calibration** against verl's RFC #7579 ("[RFC] A crash-durable replay buffer for the V1
trainer, behind TransferQueue", https://github.com/verl-project/verl/issues/7579):

> What that path does not recover is everything produced since the last checkpoint [...]
> On a two-node 27B run we measured, generation is fully overlapped with training, which
> means the buffer is the only place that work lives until it is trained on [...] the
> in-memory buffer loses 2,400 to 4,000 trajectory-generation-seconds per crash, and a
> 2-second journal loses none; the modeled agentic shape with 300-second trajectories puts
> the same loss at 16,800 to 21,600. [...] a buffer that persists only at
> `trainer.save_freq` recovers half the untrained work when the crash lands one step past a
> checkpoint, and nothing once the buffer has turned over since, which holds for three of
> the five checkpoint-cycle positions at the measured shape.

Taken from it: generation fully overlapped with training (the report prints how busy the slots
were), five checkpoint-cycle positions (a checkpoint every five steps), 300 s trajectories for
the agentic shape, and what an in-memory buffer (the loader-position-only policy: nothing
generated survives) loses per crash: 2,400-4,000 and 16,800-21,600 generation-seconds. What it
does not state (trajectory-length distribution, concurrency, buffer depth, rollouts per group,
training time) is chosen in `SHAPES` so that the loader-only mean lands in that range; the
`*_calibration` figures check it, and the notes show the RFC's second statement on the same
run (the share NeMo-RL's checkpoint-time ledger recovers, by crash position). Every other policy
runs on that same workload.

Targets: with progress every K tokens, generation-seconds lost per crash at most K tokens' time
x the rollouts in flight at a crash (averaged over the crashes); on the agentic shape at least
10x less than per-rollout seals (`agentic_progress_vs_seals`) and at least 100x less than the
loader position only (`agentic_progress_vs_loader`): value, the loss with progress; ratio, the
other policy's loss divided by it. Ours must lose no prompt and train none twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics

from .common import Figure, Report, Target, fmt_num, log, scratch_dir
from .recovery_policies import (PROGRESS_AVAILABLE, PROGRESS_MISSING, Crash, JournalPolicy, Price,
                                checkpoint_ledger, loader_position_only, price, rollout_bank)
from .recovery_workload import Shape, crash_times, simulate

RFC = "verl RFC #7579"
SHAPES = (
    Shape("two_node_27b", "two-node 27B", f"{RFC}: 'a two-node 27B run [...] generation is fully "
          "overlapped with training'; an in-memory buffer loses 2,400-4,000 per crash",
          reference_loss=(2400.0, 4000.0), rollouts_per_group=8, groups_per_step=8, slots=32,
          mean_seconds=22.0, sigma=0.6, max_seconds=132.0, depth_steps=3, train_seconds=40.0,
          tokens_per_second=40.0, progress_tokens=128),
    Shape("agentic", "agentic", f"{RFC}: 'the modeled agentic shape with 300-second trajectories'; "
          "16,800-21,600 per crash", reference_loss=(16800.0, 21600.0), rollouts_per_group=8,
          groups_per_step=4, slots=26, mean_seconds=300.0, sigma=0.3, max_seconds=1200.0,
          depth_steps=3, train_seconds=300.0, tokens_per_second=30.0, progress_tokens=128),
)
QUICK = {"steps": 20, "crashes": 6, "seed": 0}
FULL = {"steps": 60, "crashes": 40, "seed": 0}

# name -> (label, what it is)
POLICIES = {
    "loader": ("loader position only", "most frameworks: the checkpoint's weights and loader position"),
    "ledger": ("NeMo-RL ledger at checkpoints", "NeMo-RL #3480/#3923/#3924: saved with the checkpoints"),
    "bank": ("Megatron-LM rollout bank", "Megatron-LM #6352: one durable record per finished group "
             "(where prompts resume: not said)"),
    "seals": ("per-rollout seals (ours)", "this library today: Journal + replay.restore(salvage=True)"),
    "progress": ("seals + progress every K tokens (ours)", "DESIGN 12: rollout_progress every K tokens"),
}
TARGET_VS = {"seals": 10.0, "loader": 100.0}   # agentic: progress at least this many times less


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=None, help="seed of the run and its crashes (default 0)")
    parser.add_argument("--crashes", type=int, default=None, help="crashes per shape (default 6 quick, 40 full)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 20 quick, 60 full)")
    parser.add_argument("--save-period", type=int, default=None,
                        help="checkpoint every N steps, every shape and policy (default 5, as the RFC's "
                             "five checkpoint-cycle positions and NeMo-RL's review)")


def _ours(run, crashes: list[Crash], directory: str, progress: bool) -> list[Price]:
    policy = JournalPolicy(run, directory, progress=progress)
    try:
        return [price(run, c, policy.at(c)) for c in crashes]
    finally:
        policy.close()


def _price_shape(shape: Shape, params: dict, directory: str) -> tuple[dict, dict]:
    """Every policy's price at every crash of one run of `shape`; and the run's description."""
    run = simulate(shape, params["steps"], params["seed"])
    crashes = [Crash.at(run, t) for t in crash_times(run, params["crashes"], params["seed"] + 1)]
    prices: dict[str, list[Price] | None] = {
        "loader": [price(run, c, loader_position_only(run, c)) for c in crashes],
        "ledger": [price(run, c, checkpoint_ledger(run, c)) for c in crashes],
        "bank": [price(run, c, rollout_bank(run, c)) for c in crashes],
        "seals": _ours(run, crashes, os.path.join(directory, f"{shape.name}-seals"), progress=False),
        "progress": (_ours(run, crashes, os.path.join(directory, f"{shape.name}-progress"), progress=True)
                     if PROGRESS_AVAILABLE else None),
    }
    steps = params["steps"]
    described = {"parameters": shape.parameters(), "steps": steps, "crashes": len(crashes),
                 "virtual_hours": round(run.end / 3600, 2), "step_seconds": round(run.end / steps, 1),
                 "slot_utilization": round(run.slot_utilization, 3),
                 "transitions": len(run.transitions), "crash_steps_past_checkpoint":
                 [run.steps_between(run.checkpoint_before(c.time)[1], c.time) for c in crashes]}
    return prices, described


def _mean(prices: list[Price], field: str) -> float:
    return statistics.fmean(getattr(p, field) for p in prices)


def _total(prices: list[Price], field: str) -> int | None:
    counts = [getattr(p, field) for p in prices]
    return None if None in counts else sum(counts)


def _summary(prices: list[Price] | None) -> dict | None:
    if prices is None:
        return None
    lost = [p.lost for p in prices]
    deciles = statistics.quantiles(lost, n=10) if len(lost) > 1 else [lost[0]] * 9
    return {"lost_per_crash": statistics.fmean(lost), "lost_p10": deciles[0], "lost_p90": deciles[-1],
            "lost_in_flight": _mean(prices, "lost_in_flight"),
            "lost_taken_after_checkpoint": _mean(prices, "lost_taken_after_checkpoint"),
            "lost_retrained_per_crash": _mean(prices, "lost_retrained"),
            "prompts_lost": _total(prices, "prompts_lost"), "prompts_twice": _total(prices, "prompts_twice"),
            "in_flight": _mean(prices, "in_flight"), "per_crash_lost": lost}


def _count(n: int | None) -> str:
    return "n/a" if n is None else str(n)


def _ledger_by_position(positions: list[int], prices: dict) -> dict[int, float]:
    """The share of the loader-only loss NeMo-RL's ledger recovers, by how many training steps
    ended between its checkpoint and the crash (the RFC's second statement, on
    `trainer.save_freq`)."""
    shares: dict[int, list[float]] = {}
    for at, loader, ledger in zip(positions, prices["loader"], prices["ledger"]):
        if loader.lost > 0:
            shares.setdefault(at, []).append(1 - ledger.lost / loader.lost)
    return {k: statistics.fmean(v) for k, v in sorted(shares.items())}


def _table(shape: Shape, summaries: dict) -> str:
    rows = [f"**{shape.label}** (a checkpoint every {shape.save_period} steps; generation-seconds per crash, "
            "mean over the crashes):", "",
            "| policy | lost per crash | p10-p90 | of it in flight | of it taken after the checkpoint "
            "| retraining after the checkpoint | prompts lost | prompts twice | models |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, (label, models) in POLICIES.items():
        s = summaries[name]
        if s is None:
            rows.append(f"| {label} | {PROGRESS_MISSING} | | | | | | | {models} |")
            continue
        rows.append(f"| {label} | {fmt_num(s['lost_per_crash'])} | {fmt_num(s['lost_p10'])}-"
                    f"{fmt_num(s['lost_p90'])} | {fmt_num(s['lost_in_flight'])} | "
                    f"{fmt_num(s['lost_taken_after_checkpoint'])} | {fmt_num(s['lost_retrained_per_crash'])} "
                    f"| {_count(s['prompts_lost'])} | {_count(s['prompts_twice'])} | {models} |")
    return "\n".join(rows)


def _figures(report: Report, shape: Shape, summaries: dict) -> None:
    lost = {name: (s["lost_per_crash"] if s is not None else None) for name, s in summaries.items()}
    lo, hi = shape.reference_loss
    loader = summaries["loader"]
    report.add(Figure(
        f"{shape.name}_calibration", f"{shape.label}: loader position only, lost per crash (calibration)",
        lost["loader"], "s", target=Target(min_value=lo, max_value=hi),
        note=f"{shape.source}; p10-p90 over the crashes {fmt_num(loader['lost_p10'])}-"
             f"{fmt_num(loader['lost_p90'])} s"))
    for name in ("ledger", "bank", "seals"):
        report.add(Figure(f"{shape.name}_{name}", f"{shape.label}: {POLICIES[name][0]}, lost per crash",
                          lost[name], "s", reference=lost["loader"], reference_label="loader position only",
                          times_less=True))
    missing = "" if PROGRESS_AVAILABLE else PROGRESS_MISSING
    in_flight = loader["in_flight"]   # the run's, the same for every policy
    report.add(Figure(
        f"{shape.name}_progress_bound", f"{shape.label}: {POLICIES['progress'][0]}, lost per crash "
        f"vs K tokens' time x rollouts in flight", lost["progress"], "s",
        target=Target(max_value=shape.progress_seconds * in_flight), not_run=missing,
        note=f"K = {shape.progress_tokens} tokens = {shape.progress_seconds:.2f} s, "
             f"{in_flight:.1f} rollouts in flight at a crash on average"))
    for name in ("seals", "loader", "ledger", "bank"):
        minimum = TARGET_VS.get(name) if shape.name == "agentic" else None
        report.add(Figure(
            f"{shape.name}_progress_vs_{name}", f"{shape.label}: progress vs {POLICIES[name][0]}",
            lost["progress"], "s", reference=lost[name], reference_label=POLICIES[name][0],
            target=Target(min_ratio=minimum) if minimum is not None else None, times_less=True,
            not_run=missing))
    ours = [s for s in (summaries["seals"], summaries["progress"]) if s is not None]
    report.add(Figure(
        f"{shape.name}_ours_exactly_once", f"{shape.label}: prompts lost or trained twice, ours (all crashes)",
        sum(s["prompts_lost"] + s["prompts_twice"] for s in ours), "prompts", target=Target(max_value=0)))


def run(args) -> Report:
    params = dict(QUICK if args.quick else FULL)
    for key in ("seed", "crashes", "steps"):
        if getattr(args, key, None) is not None:
            params[key] = getattr(args, key)
    if params["crashes"] < 1:
        raise ValueError(f"--crashes must be at least 1, not {params['crashes']}")
    tmpfs = "/dev/shm" if args.dir is None and os.path.isdir("/dev/shm") else args.dir
    report = Report("recovery", quick=args.quick, directory=tmpfs)
    shapes = SHAPES
    if args.save_period is not None:
        shapes = tuple(dataclasses.replace(s, save_period=args.save_period) for s in SHAPES)
    report.meta = {"params": params, "progress_measured": PROGRESS_AVAILABLE, "shapes": {}}
    with scratch_dir(tmpfs, prefix="bench-recovery-") as d:
        for shape in shapes:
            log(f"bench recovery: {shape.label}, {params['steps']} steps, {params['crashes']} crashes ...")
            prices, described = _price_shape(shape, params, d)
            summaries = {name: _summary(p) for name, p in prices.items()}
            by_position = _ledger_by_position(described["crash_steps_past_checkpoint"], prices)
            report.meta["shapes"][shape.name] = {**described, "source": shape.source,
                                                 "reference_loss": shape.reference_loss,
                                                 "ledger_recovered_by_position": by_position,
                                                 "policies": summaries}
            _figures(report, shape, summaries)
            report.tables.append(_table(shape, summaries))
            report.note(f"{shape.label}: {described['steps']} steps, {described['crashes']} crashes, "
                        f"{described['virtual_hours']} h of virtual time, a step every "
                        f"{described['step_seconds']} s, slots busy {described['slot_utilization']:.0%} "
                        "of the time; parameters (the RFC states the overlap, the five checkpoint-cycle "
                        "positions and the agentic 300 s; the rest is chosen so that the loader-only loss "
                        "lands in its range): "
                        + ", ".join(f"{k} {v}" for k, v in shape.parameters().items()))
            report.note(f"{shape.label}: share of the loader-only loss NeMo-RL's ledger recovers, by "
                        "training steps between the checkpoint and the crash: "
                        + ", ".join(f"{k}: {v:.0%}" for k, v in by_position.items())
                        + f" ({RFC}: half when the crash lands one step past a checkpoint, nothing in "
                          "three of the five checkpoint-cycle positions)")
    return report
