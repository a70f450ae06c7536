"""`python -m bench recovery`: the report's structure and the invariants that hold whatever the
calibration (ours loses no prompt and trains none twice; the loader position alone loses
prompts or repeats them; per-rollout seals lose less than the loader alone, and never more
than NeMo-RL's ledger, whose kept rows they include; what each loses splits into newer weights'
work, rollouts in flight and the rest, which is nothing for seals); and the progress policy's
calls."""

from __future__ import annotations

import pytest

from bench.recovery_policies import PROGRESS_MISSING, WrittenRows, calls, record_progress
from bench.recovery_workload import Shape, Transition, simulate
from tests.support.bench_run import quick_report

SHAPES = ("two_node_27b", "agentic")
POLICIES = ("loader", "ledger", "bank", "seals", "progress")


@pytest.fixture(scope="module")
def report():
    return quick_report("recovery", timeout=120)


def test_every_shape_prices_every_policy(report):
    assert report["benchmark"] == "recovery" and report["mode"] == "quick"
    names = {f["name"]: f for f in report["figures"]}
    for shape in SHAPES:
        assert set(report["meta"]["shapes"][shape]["policies"]) == set(POLICIES)
        assert {f"{shape}_calibration", f"{shape}_ours_exactly_once", f"{shape}_progress_bound",
                f"{shape}_seals_lost_other"} <= set(names)
        for other in ("seals", "loader", "ledger", "bank"):
            f = names[f"{shape}_progress_vs_{other}"]
            assert f["ratio_is"] == "reference/value" and f["reference"] > 0
    for name, minimum in (("agentic_progress_vs_seals", 10), ("agentic_progress_vs_loader", 100)):
        assert names[name]["target"]["min_ratio"] == minimum
    for f in report["figures"]:
        assert f["result"] in ("PASS", "MISS", "info", "NOT RUN"), f


def test_progress_is_measured_or_says_it_is_not(report):
    measured = report["meta"]["progress_measured"]
    progress = [f for f in report["figures"] if "_progress_" in f["name"]]
    assert len(progress) == 2 * 5
    for f in progress:
        if measured:
            assert f["result"] in ("PASS", "MISS", "info") and f["value"] is not None
        else:
            assert f["result"] == "NOT RUN" and f["value"] is None and f["ratio"] is None
            assert f["note"] == PROGRESS_MISSING
    for shape in SHAPES:
        assert (report["meta"]["shapes"][shape]["policies"]["progress"] is None) is not measured


def test_invariants_of_the_policies(report):
    for shape in SHAPES:
        p = report["meta"]["shapes"][shape]["policies"]
        ours = [p[name] for name in ("seals", "progress") if p[name] is not None]
        for s in ours:
            assert s["prompts_lost"] == 0 and s["prompts_twice"] == 0, shape
        assert p["loader"]["prompts_lost"] + p["loader"]["prompts_twice"] > 0, shape
        assert p["seals"]["lost_per_crash"] < p["loader"]["lost_per_crash"], shape
        for seals, ledger in zip(p["seals"]["per_crash_lost"], p["ledger"]["per_crash_lost"]):
            assert seals <= ledger + 1e-6, shape
        assert p["bank"]["prompts_lost"] is None  # the rule says nothing of where prompts resume
        for s in p.values():  # the decomposition of what is lost: newer weights, in flight, the rest
            if s is not None:
                parts = s["lost_newer_weights"] + s["lost_in_flight_checkpoint_weights"] + s["lost_other"]
                assert abs(parts - s["lost_per_crash"]) <= 1e-6 * max(1.0, s["lost_per_crash"]), shape
        # restore adopts the prompts taken after the checkpoint with their rollouts sealed by its
        # weights: what seals still lose is newer weights' work and rollouts in flight
        assert p["seals"]["lost_other"] <= 1e-6 * p["seals"]["lost_per_crash"], shape
        assert p["ledger"]["lost_other"] > 0, shape


def test_progress_calls_land_between_a_rollouts_start_and_its_seal():
    shape = Shape("t", "tiny", "", (0.0, 0.0), rollouts_per_group=2, groups_per_step=2, slots=3,
                  mean_seconds=10.0, sigma=0.5, max_seconds=40.0, depth_steps=2, train_seconds=5.0,
                  tokens_per_second=10.0, progress_tokens=16)
    run = simulate(shape, steps=6, seed=3)
    seen: dict[tuple[int, int], list[int]] = {}
    sealed: set[tuple[int, int]] = set()
    last = 0.0
    for time, call in calls(run, progress=True):
        assert time >= last
        last = time
        if isinstance(call, Transition):
            if call.kind == "rollout_sealed":
                sealed.add(call.args[:2])
            continue
        gid, index, tokens = call
        r = run.groups[gid].rollouts[index]
        assert (gid, index) not in sealed and r.start < time < r.end
        seen.setdefault((gid, index), []).append(tokens)
    assert seen, "no progress recorded"
    for (gid, index), tokens in seen.items():
        r = run.groups[gid].rollouts[index]
        assert tokens == [16 * k for k in range(1, len(tokens) + 1)]
        assert (len(tokens) + 1) * 1.6 >= r.seconds  # one every 16 tokens, up to the seal


def test_record_progress_puts_the_row_then_names_it_with_design_12s_arguments():
    shape = Shape("t", "tiny", "", (0.0, 0.0), rollouts_per_group=2, groups_per_step=2, slots=3,
                  mean_seconds=10.0, sigma=0.5, max_seconds=40.0, depth_steps=2, train_seconds=5.0,
                  tokens_per_second=10.0, progress_tokens=16)
    run = simulate(shape, steps=2, seed=1)
    rows = WrittenRows()

    class Recorder:
        def __init__(self):
            self.calls = []

        def rollout_progress(self, ref, **kwargs):
            self.calls.append((ref, kwargs, rows.has(ref.locator)))

    j = Recorder()
    r = run.groups[1].rollouts[1]
    record_progress(j, rows, run, 1, 1, 48)
    [(ref, kwargs, row_was_there)] = j.calls
    assert (ref.group_id, ref.index, ref.attempt) == (1, 1, 0) and row_was_there
    assert kwargs == {"tokens": 48, "turn": None, "policy_version": r.version}
