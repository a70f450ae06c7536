"""The example's parts on their own: the dataset and collate function restore rehydrates with,
the crash-safe data plane (per group and per rollout attempt), the sealed rows a checkpoint
directory carries, the ledger's final-history replay, the kill plans, the trainer's loop with
the journal off."""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

from journal import Group, GroupRef, Journal, Owner, Reader, RolloutRef
from replay import fingerprint, restore
from snapshot import compact

from examples.bookkeeping import Ledger, read_ledger
from examples import chaos
from examples.chaos import kill_plan
from examples.data_plane import LocalDataPlane
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


def test_data_plane_put_has_save_import_sweep(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    rows = {"rewards": torch.tensor([1.0, 0.0, 1.0, 0.0])}
    loc = dp.put(17, rows)
    assert loc == "g17.pt" and dp.has(loc) and not dp.has("g18.pt") and not dp.has("../x")
    assert torch.equal(dp.get(loc)["rewards"], rows["rewards"])
    cut = tmp_path / "cut"
    (cut / "data_plane").mkdir(parents=True)
    g = Group(17, 3, "math", 0, None, Owner.REPLAY, locator=loc)
    dp.save(str(cut / "data_plane"), [g])
    missing = Group(18, 4, "math", 0, None, Owner.REPLAY, locator="g18.pt")
    with pytest.raises(FileNotFoundError):
        dp.save(str(tmp_path), [missing])
    # a crashed write leaves only a temporary file, which the sweep removes with unwanted rows
    open(tmp_path / "rows" / ".tmp-g19.pt-dead", "wb").close()
    dp.put(20, rows)
    assert dp.sweep(keep=[loc]) == 2
    assert sorted(os.listdir(tmp_path / "rows")) == ["g17.pt"]
    dp.delete([loc])
    assert not dp.has(loc)
    assert dp.import_cut(str(cut)) == 1 and torch.equal(dp.get(loc)["rewards"], rows["rewards"])


def test_data_plane_rollout_rows_are_per_attempt_and_a_cut_takes_a_replay_groups_rollouts(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    (gid,) = j.taken([GroupRef(idx=3)])
    j.admitted([gid], target_step=1, rollouts=2)
    late = dp.put_rollout(gid, 1, 0, {"reward": torch.tensor(0.0)})
    kept = dp.put_rollout(gid, 1, 1, {"reward": torch.tensor(1.0)})
    # a late result of attempt 0 and the result of attempt 1 are different rows
    assert (late, kept) == (f"g{gid}-r1-a0.pt", f"g{gid}-r1-a1.pt") and dp.has(late) and dp.has(kept)
    dp.delete([late])
    assert not dp.has(late) and float(dp.get(kept)["reward"]) == 1.0
    first = dp.put_rollout(gid, 0, 0, {"reward": torch.tensor(0.5)})
    j.rollout_failed([RolloutRef(gid, 1, 0)], reason="deadline")
    j.rollout_sealed([RolloutRef(gid, 0, 0, first)])
    j.rollout_sealed([RolloutRef(gid, 1, 1, kept)])
    j.finished([gid])
    j.close()
    g = Reader(path).fold().live[gid]
    assert g.owner == Owner.REPLAY and g.locator is None
    # a REPLAY group admitted with rollouts=2: its rows are its sealed rollouts' rows
    (tmp_path / "cut").mkdir()
    dp.save(str(tmp_path / "cut"), [g])
    assert sorted(os.listdir(tmp_path / "cut")) == sorted([first, kept])
    assert dp.sweep(keep=[kept]) == 1 and os.listdir(tmp_path / "rows") == [kept]
    assert dp.import_rows(str(tmp_path / "cut")) == 2 and dp.has(first)


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


def test_a_cut_carries_the_rows_of_its_admitted_groups_sealed_rollouts(tmp_path):
    """compact(into=..., data_plane=...) saves the REPLAY groups' rows and the sealed rollouts'
    rows of ADMITTED groups; a restore from that cut alone, on a fresh data plane that imported
    them, keeps those rollouts sealed instead of regenerating them."""
    dp = LocalDataPlane(str(tmp_path / "rows"))
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    a, c = j.taken([GroupRef(idx=i) for i in (1, 3)])
    j.admitted([a], target_step=1, rollouts=2)
    j.admitted([c], target_step=1)                                  # group-level: nothing sealed
    sealed = dp.put_rollout(a, 1, 0, {"reward": torch.tensor(1.0)})
    j.rollout_sealed([RolloutRef(a, 1, 0, sealed)])
    lsn = j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    j.close()
    cut = str(tmp_path / "ckpt" / "ownership")
    compact(path, at=lsn, into=cut, data_plane=dp, retention=None)
    assert os.listdir(os.path.join(cut, "data_plane")) == [sealed]
    fresh = LocalDataPlane(str(tmp_path / "node2-rows"))           # the node that resumes
    assert fresh.import_cut(cut) == 1
    state = restore(cut, data_plane=fresh)
    (ra, rc) = sorted(state.admitted, key=lambda g: g.group_id)
    assert [(r.index, r.sealed, r.locator) for r in ra.rollouts] == [(0, False, None), (1, True, sealed)]
    assert state.demoted == [] and state.lost_rollouts == [] and rc.rollouts is None
