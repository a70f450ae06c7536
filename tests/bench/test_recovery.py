"""`python -m bench recovery`: the report's structure and the invariants that hold whatever the
calibration (ours loses no prompt and trains none twice, at every lag bound k; the loader
position alone loses prompts or repeats them; a larger k never loses more, and at the
checkpoint interval seals lose only rollouts in flight; what each loses splits into newer
weights' work, rollouts in flight and the rest, which is nothing for seals); the peers' models
(verl RFC #7579's durable buffer); and the progress policy's calls."""

from __future__ import annotations

import pytest

from bench.common import Figure, Target
from bench.recovery import LAGS, _summary
from bench.recovery_policies import (OURS, PEERS, READINGS, Crash, Price, WrittenRows, calls,
                                     durable_buffer, ours, record_progress)
from bench.recovery_tables import from_lag
from bench.recovery_workload import Shape, Transition, simulate
from tests.support.bench_run import quick_report

SHAPES = ("27b", "agentic")
TINY = Shape("t", "tiny", "", (0.0, 0.0), rollouts_per_group=2, groups_per_step=2, slots=3,
             mean_seconds=10.0, sigma=0.5, max_seconds=40.0, depth_steps=2, train_seconds=5.0,
             tokens_per_second=10.0, progress_tokens=16)


@pytest.fixture(scope="module")
def report():
    return quick_report("recovery", timeout=300)


def _policies(report, shape):
    return report["meta"]["shapes"][shape]["policies"]


def test_every_shape_prices_every_policy_and_ours_at_every_lag(report):
    assert report["benchmark"] == "recovery" and report["mode"] == "quick"
    names = {f["name"]: f for f in report["figures"]}
    for shape in SHAPES:
        meta = report["meta"]["shapes"][shape]
        assert meta["lags"] == list(LAGS) and meta["staleness"] == 2
        assert set(meta["policies"]) == {*PEERS, *READINGS, *(ours(m, k) for m in OURS for k in LAGS)}
        assert {f"{shape}_calibration", f"{shape}_ours_exactly_once", f"{shape}_progress_bound",
                f"{shape}_seals_lost_other", f"{shape}_progress_vs_best_peer",
                f"{shape}_staleness_vs_best_peer"} <= set(names)
        for other in ("seals", *PEERS, *READINGS):
            f = names[f"{shape}_progress_vs_{other}"]
            assert f["ratio_is"] == "reference/value" and f["reference"] > 0
        assert set(meta["beats_from_k"]) == set(OURS)
    for name, minimum in (("agentic_progress_vs_best_peer", 20), ("27b_progress_vs_best_peer", 10),
                          ("agentic_progress_vs_seals", 50), ("agentic_progress_vs_loader", 200),
                          ("agentic_staleness_vs_best_peer", 5), ("27b_staleness_vs_best_peer", 5)):
        assert names[name]["target"]["min_ratio"] == minimum
    for f in report["figures"]:
        expected = ("calibrated", "MISS") if f["name"].endswith("_calibration") else ("PASS", "MISS", "info")
        assert f["result"] in expected, f


def test_the_best_peer_is_the_peer_that_loses_least_and_ours_is_priced_at_the_checkpoint_interval(report):
    names = {f["name"]: f for f in report["figures"]}
    for shape in SHAPES:
        p = _policies(report, shape)
        interval = report["meta"]["shapes"][shape]["parameters"]["save_period"]
        best = names[f"{shape}_progress_vs_best_peer"]
        assert best["reference"] == min(p[name]["lost_per_crash"] for name in PEERS)
        assert best["value"] == p[ours("progress", interval)]["lost_per_crash"]
        stale = names[f"{shape}_staleness_vs_best_peer"]
        assert stale["value"] == p[ours("progress", 2)]["lost_per_crash"]
        assert names[f"{shape}_progress_vs_seals"]["reference"] == p[ours("seals", 0)]["lost_per_crash"]


def test_invariants_of_the_policies(report):
    for shape in SHAPES:
        p = _policies(report, shape)
        interval = report["meta"]["shapes"][shape]["parameters"]["save_period"]
        for k in LAGS:
            for mode in OURS:
                s = p[ours(mode, k)]
                assert s["prompts_lost"] == 0 and s["prompts_twice"] == 0, (shape, mode, k)
            # a prefix kept is never worth less than none, crash by crash
            for seals, progress in zip(p[ours("seals", k)]["per_crash_lost"], p[ours("progress", k)]["per_crash_lost"]):
                assert progress <= seals + 1e-6, (shape, k)
        for mode in OURS:  # a larger bound keeps a superset: never more lost, crash by crash
            for k in LAGS[1:]:
                for tighter, looser in zip(p[ours(mode, k - 1)]["per_crash_lost"], p[ours(mode, k)]["per_crash_lost"]):
                    assert looser <= tighter + 1e-6, (shape, mode, k)
        # at the checkpoint interval every finished rollout comes back: seals lose what was in flight
        at_interval = p[ours("seals", interval)]
        assert at_interval["lost_per_crash"] == pytest.approx(at_interval["lost_in_flight"])
        assert p[ours("seals", interval)]["lost_per_crash"] < p[ours("seals", 0)]["lost_per_crash"]
        assert p["loader"]["prompts_lost"] + p["loader"]["prompts_twice"] > 0, shape
        assert p[ours("seals", 0)]["lost_per_crash"] < p["loader"]["lost_per_crash"], shape
        for seals, ledger in zip(p[ours("seals", 0)]["per_crash_lost"], p["ledger"]["per_crash_lost"]):
            assert seals <= ledger + 1e-6, shape
        for whole, per_trajectory in zip(p["rfc"]["per_crash_lost"], p["rfc_per_trajectory"]["per_crash_lost"]):
            assert per_trajectory <= whole + 1e-6, shape
        for name in ("bank", "rfc", "rfc_per_trajectory"):  # the rules say nothing of where prompts resume
            assert p[name]["prompts_lost"] is None
        for s in p.values():  # the decomposition of what is lost: newer weights, in flight, the rest
            parts = s["lost_newer_weights"] + s["lost_in_flight_checkpoint_weights"] + s["lost_other"]
            assert abs(parts - s["lost_per_crash"]) <= 1e-6 * max(1.0, s["lost_per_crash"]), shape
            assert 0 <= s["lost_p10"] <= s["lost_p90"]
        # restore adopts the prompts taken after the checkpoint with their rollouts sealed by its
        # weights: what seals still lose is newer weights' work and rollouts in flight
        assert p[ours("seals", 0)]["lost_other"] <= 1e-6 * p[ours("seals", 0)]["lost_per_crash"], shape
        assert p["ledger"]["lost_other"] > 0, shape


def test_the_spread_of_the_loss_stays_within_the_losses_measured():
    """p10-p90 over a few crashes: interpolated between the losses measured, never extrapolated
    past them (a loss is never negative)."""
    lost = [486.2, 2295.6, 4289.3, 8667.2, 10157.6, 19105.3]   # a quick run's six crashes
    s = _summary([Price(lost=x) for x in lost])
    assert min(lost) <= s["lost_p10"] <= s["lost_p90"] <= max(lost)
    assert s["lost_p10"] > min(lost) and s["lost_p90"] < max(lost)  # between, not clamped to the ends


def test_a_calibration_figure_says_calibrated_not_pass():
    target = Target(min_value=10.0, max_value=20.0)
    assert Figure("c", "in range", 15.0, "s", target=target, calibration=True).verdict == "calibrated"
    assert Figure("c", "off range", 25.0, "s", target=target, calibration=True).verdict == "MISS"
    assert Figure("r", "a result", 15.0, "s", target=target).verdict == "PASS"


def test_the_durable_buffer_keeps_what_finished_by_its_last_snapshot_untrained_whatever_its_weights():
    """verl RFC #7579: finished untrained groups at the last 2 s snapshot come back, of any
    weights; a prompt still generating starts over (read per trajectory, its finished ones stay);
    what the dead run trained is consumed."""
    run = simulate(TINY, steps=12, seed=4)
    checked = 0
    for time in [run.checkpoints[0][1] + d for d in (3.3, 7.9, 12.1, 20.6)]:
        crash = Crash.at(run, time)
        snapshot = time - time % 2.0
        whole, each = durable_buffer(run, crash), durable_buffer(run, crash, per_trajectory=True)
        for g in run.groups.values():
            in_weights = g.trained_step is not None and g.trained_step <= crash.step
            consumed = g.trained_at is not None and g.trained_at <= snapshot
            done = [r.end is not None and r.end <= snapshot for r in g.rollouts]
            for r, finished in zip(g.rollouts, done):
                key = (g.group_id, r.index)
                kept = finished and not in_weights and not consumed
                assert (key in each.kept) == kept
                assert (key in whole.kept) == (kept and all(done))
                if kept:
                    assert each.kept[key] == r.seconds
                    checked += r.version > crash.step   # newer weights' work is kept too
    assert checked > 0, "no crash had a finished group of newer weights to keep"


def test_from_lag_is_the_bound_from_which_on_ours_loses_less():
    summaries = {"bank": {"lost_per_crash": 100.0},
                 **{ours("seals", k): {"lost_per_crash": lost} for k, lost in enumerate([300, 120, 90, 80])}}
    assert from_lag(summaries, "seals", "bank", [0, 1, 2, 3]) == 2
    summaries[ours("seals", 3)]["lost_per_crash"] = 100.0   # a tie at the top is no win
    assert from_lag(summaries, "seals", "bank", [0, 1, 2, 3]) is None


def test_progress_calls_land_between_a_rollouts_start_and_its_seal():
    run = simulate(TINY, steps=6, seed=3)
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
    run = simulate(TINY, steps=2, seed=1)
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

