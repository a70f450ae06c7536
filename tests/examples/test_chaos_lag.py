"""The example trainer's kill loop with `--max-policy-lag` (DESIGN 14): SIGKILLs at random moments,
in checkpoint saves and in compaction, each restore keeping the work of weights up to K steps
newer than its checkpoint (K = the checkpoint interval: every weights a crash can lose), and
continuing the prefixes it kept; the audit still says every prompt was trained exactly once
or dropped with a reason, and the trainer's ledger agrees.

CI size by default (5 kills, a small dataset); OJ_CHAOS_LAG_KILLS=100 (or any number) runs
the full-size dataset with that many kills."""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from examples import chaos

SOAK_KILLS = int(os.environ.get("OJ_CHAOS_LAG_KILLS", "0") or 0)
CKPT_EVERY = 3


@pytest.fixture(scope="module")
def lag_run(fast_tmp_module):
    size = {"kills": SOAK_KILLS, "dataset_size": 2048, "batch_size": 16,
            "timeout": max(900.0, 12.0 * SOAK_KILLS)} if SOAK_KILLS else \
        {"kills": 5, "dataset_size": 384, "batch_size": 32, "timeout": 300.0}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        s = chaos.run(chaos.Options(out=str(fast_tmp_module / "lag-run"), seed=7, epochs=2, ckpt_every=CKPT_EVERY,
                                    progress_every=4, max_policy_lag=CKPT_EVERY, verbose=True, **size))
    return s, printed.getvalue() + chaos.render(s)


def test_kills_with_a_lag_bound_audit_zero_twice_zero_lost(lag_run):
    s, text = lag_run
    assert s["kills"] >= (SOAK_KILLS or 5) and s["restores"] >= 1
    cli = s["cli_audit"]
    assert cli["clean"] is True
    for e in cli["epochs"]:
        assert e["trained_more_count"] == 0 and e["lost_count"] == 0 and e["in_flight"] == 0
        assert e["rows_taken"] == s["dataset_size"]
        assert e["trained_once"] + sum(e["dropped"].values()) == s["dataset_size"]
    assert s["twice"] == 0 and s["lost"] == 0 and s["ledger_mismatches"] == [] and s["ok"] is True
    assert f"--max-policy-lag {CKPT_EVERY}: {s['kept_newer_rollouts']} rollouts" in text
    assert [line for line in text.splitlines() if len(line) > 100 and s["out"] not in line] == []


def test_restores_keep_the_work_of_weights_that_died_and_continue_its_prefixes(lag_run):
    s, _ = lag_run
    assert s["max_policy_lag"] == CKPT_EVERY
    # what the dead runs' newer weights sealed came back instead of regenerating
    assert s["kept_newer_rollouts"] > 0
    # prefixes were continued, those of weights that died among them
    assert s["continued_rollouts"] > 0 and s["kept_tokens"] >= s["continued_rollouts"]
    assert 0 < s["kept_newer_prefixes"] <= s["continued_rollouts"]
