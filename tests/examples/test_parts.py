"""The example's parts on their own: the dataset and collate function restore rehydrates with,
the ledger's final-history replay, the kill plans, the trainer's loop with the journal off.
(The data plane is the library's: tests/replay/test_data_plane.py.)"""

from __future__ import annotations

import asyncio
import os

import pytest

from replay import fingerprint

from examples.bookkeeping import Ledger, read_ledger
from examples import chaos
from examples.chaos import kill_plan
from examples.dataset import PromptDataset, collate_fn
from examples.trainer import Trainer, parse_args


def test_dataset_is_deterministic_two_tasks_and_fingerprints_are_stable():
    a, b = PromptDataset(2048, seed=0), PromptDataset(2048, seed=0)
    assert len(a) == 2048
    assert [a[i] for i in range(0, 2048, 97)] == [b[i] for i in range(0, 2048, 97)]
    assert {a[i]["task_name"] for i in range(2048)} == {"math", "logic"}
    assert all(a[i]["idx"] == i for i in range(2048))
    assert fingerprint(a[41]) == fingerprint(b[41]) != fingerprint(a[42])
    assert PromptDataset(2048, seed=1)[41] != a[41] or PromptDataset(2048, seed=1)[42] != a[42]
    batch = collate_fn([a[3], a[5]])
    assert batch["idx"].tolist() == [3, 5] and batch["tokens"].shape == (2, 6)
    assert batch["task_name"] == [a[3]["task_name"], a[5]["task_name"]]


def test_ledger_final_history_cuts_off_what_died_with_the_process(tmp_path):
    path = str(tmp_path / "ledger.log")
    led = Ledger(path)
    led.resumed(0)
    led.trained(1, [(0, 5), (0, 6)], generation_us=10)
    led.checkpoint(1)
    led.trained(2, [(0, 7)], generation_us=200)
    led.dropped("rollout_failed", [(0, 9)], generation_us=66)
    led.checkpoint(2)          # begun, never committed
    led.trained(3, [(0, 8)], generation_us=3000)
    led.count(generation_us=40000)
    led.resumed(1)             # the process died; restored to step 1
    led.trained(2, [(0, 7), (0, 8)], generation_us=500000)
    led.dropped("rollout_failed", [(0, 4)], generation_us=7)
    led.count(regenerated_groups=2)
    led.close()
    with open(path, "ab") as f:
        f.write(b"T 3 0:99")   # a torn last line never happened
    h = read_ledger(path)
    assert dict(h.trained) == {(0, 5): 1, (0, 6): 1, (0, 7): 1, (0, 8): 1}
    assert h.dropped == {(0, 4): "rollout_failed"} and h.restarts == 2
    assert h.counters["regenerated_groups"] == 2
    # the generation time of what the final history trained and dropped; counters are summed
    # over every run
    assert (h.used_generation_us, h.dropped_generation_us) == (500010, 7)
    assert h.counters["generation_us"] == 40000
    rep = h.report(10, 1)
    assert rep["trained_once"] == 4 and rep["trained_twice"] == 0 and rep["lost"] == 5


def test_ledger_counts_a_row_trained_on_two_branches_twice(tmp_path):
    """The baseline's failure mode in miniature: training after a restart what the surviving
    checkpoint already trained is a duplicate on the final history."""
    path = str(tmp_path / "ledger.log")
    led = Ledger(path)
    led.resumed(0)
    led.trained(1, [(0, 1)])
    led.checkpoint(1)
    led.resumed(1)
    led.trained(2, [(0, 1)])
    led.close()
    rep = read_ledger(path).report(2, 1)
    assert rep["trained_twice"] == 1 and rep["lost"] == 1


def test_kill_plan_covers_saves_compactions_restores_and_is_seeded():
    plan = kill_plan(8, 5, 100)
    assert plan == kill_plan(8, 5, 100) and plan != kill_plan(8, 6, 100)
    aims = [a for a, _, _ in plan]
    assert {"checkpoint_save", "compaction", "restore"} <= set(aims) and len(plan) == 8
    steps = [s for _, s, _ in plan]
    assert steps == sorted(steps) and 1 <= steps[0] and steps[-1] <= 80


def test_ray_kill_plan_is_seeded_and_has_only_the_kill_kinds_asked_for():
    every = chaos.ray_kill_plan(chaos.Options(seed=4, actor_kills=5, node_kills=2), 60)
    assert every == chaos.ray_kill_plan(chaos.Options(seed=4, actor_kills=5, node_kills=2), 60)
    assert sorted(k for _, k in every) == ["actor"] * 5 + ["node"] * 2
    assert [s for s, _ in every] == sorted(s for s, _ in every) and 1 <= every[0][0] and every[-1][0] <= 48
    only = chaos.Options(seed=4, actor_kills=5, node_kills=2, kill_kinds=("actor",))
    actors = chaos.ray_kill_plan(only, 60)
    # the same kills at the same steps, whichever kinds a run leaves out
    assert actors == [k for k in every if k[1] == "actor"]
    assert chaos.ray_kill_plan(chaos.Options(seed=4, kill_kinds=("controller",)), 60) == []
    o, _ = chaos.parse_args(["--ray", "--kill-kinds", "node, actor"])
    assert o.kill_kinds == ("actor", "node")
    for argv in (["--ray", "--kill-kinds", "actor,disk"], ["--kill-kinds", "actor"]):
        with pytest.raises(SystemExit):
            chaos.parse_args(argv)


def test_no_journal_runs_the_rollout_level_loop_with_nothing_durable(tmp_path, capsys):
    out = str(tmp_path / "run")
    cfg = parse_args(["--out", out, "--no-journal", "--dataset-size", "32", "--epochs", "1",
                      "--batch-size", "8", "--rollouts", "4", "--workers", "4", "--slow-rate", "0.2",
                      "--failure-rate", "0",
                      "--ckpt-every", "2", "--ckpt-save-seconds", "0"])
    assert cfg.baseline and cfg.rollout_level
    assert not parse_args(["--out", out, "--baseline"]).rollout_level
    os.makedirs(out)
    asyncio.run(Trainer(cfg).run())
    said = capsys.readouterr().out
    assert "mode=rollout" in said.split("RESUMED", 1)[1].split("\n", 1)[0]
    assert not os.path.exists(cfg.journal_dir)
    rep = read_ledger(cfg.ledger_path).report(32, 1)
    assert rep["trained_once"] + rep["dropped"] == 32 and rep["trained_twice"] == rep["lost"] == 0
    c = rep["counters"]
    # slow workers missed their deadline: retried one rollout at a time, the late result dropped
    assert c["rollouts_retried"] >= 1 and c["late_results_ignored"] >= 1
    # every start is counted: the trained groups' sealed rollouts and the given-up attempts
    assert c["rollouts_started"] >= 4 * rep["trained_once"] + c["rollouts_retried"]
    with pytest.raises(SystemExit):
        parse_args(["--out", out, "--no-journal", "--group-level"])
