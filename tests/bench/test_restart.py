"""`python -m bench restart`: the report's figures and targets, and what every restart must do
whatever the speeds (restore from the newest cut, the in-flight groups back); run small."""

from __future__ import annotations

import json

import pytest

from bench.restart import LIVE, RATIO_TARGET, SECONDS_TARGET
from tests.support.bench_run import bench

BASE = 100


@pytest.fixture(scope="module")
def report():
    p = bench(["-m", "bench", "restart", "--quick", "--json", "--base", str(BASE), "--rounds", "1"],
              timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_named_figures_and_their_targets(report):
    assert report["benchmark"] == "restart" and report["mode"] == "quick"
    figures = {f["name"]: f for f in report["figures"]}
    for layout in ("1seg", "rotated"):
        f = figures[f"restart_{layout}_100x"]
        assert f["ratio_is"] == "value/reference" and f["target"]["max_ratio"] == RATIO_TARGET
        assert f["value"] > 0 and f["reference"] > 0
        assert f["result"] == ("PASS" if f["ratio"] <= RATIO_TARGET else "MISS"), f
        assert figures[f"restart_{layout}_10x"]["target"] is None
        s = figures[f"restart_{layout}_100x_seconds"]
        assert s["target"]["max_value"] == SECONDS_TARGET and s["value"] == f["value"]
        assert s["result"] == ("PASS" if s["value"] <= SECONDS_TARGET else "MISS"), s


def test_every_restart_comes_back_from_the_newest_cut_with_the_groups_in_flight(report):
    built, runs = report["meta"]["built"], report["meta"]["runs"]
    assert set(runs) == {f"{layout}-{k}x" for layout in ("1seg", "rotated") for k in (1, 10, 100)}
    for key, restarts in runs.items():
        assert built[key]["groups"] == BASE * int(key.split("-")[1][:-1])
        for got in restarts:
            assert got["admitted"] == LIVE and got["base_cut"].startswith("cut-"), (key, got)
            assert got["restore"] > 0 and got["open"] > 0
    assert built["1seg-100x"]["live_segments"] == 1 == built["1seg-100x"]["segments"]
    assert built["rotated-100x"]["segments"] > 1
