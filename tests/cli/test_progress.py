"""Prefixes (`rollout_progress`) in `journal-inspect`: `log` and `group` show them (tokens, turn,
locator, attempt), and `audit` counts the tokens resumes continued and those they regenerated."""

from __future__ import annotations

import warnings

from journal import GroupRef, Journal, JournalWarning, RolloutRef
from replay import audit, restore
from tests.support.cli_run import cli, cli_json


def _crashed_and_resumed(path: str) -> int:
    """Group g with rollouts=3: rollout 0 holds a 40-token prefix of the checkpoint's weights, 1
    a 25-token one by newer weights, 2 none; a crash, then a resume (it continues rollout 0's
    prefix and regenerates rollout 1's)."""
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=3)], loader_state={"pos": 1})
        j.admitted([g], target_step=2, policy_version=1, rollouts=3)
        j.rollout_progress(RolloutRef(g, 0, 0, "g0-r0-a0-p1.rows"), tokens=16, policy_version=1)
        j.rollout_progress(RolloutRef(g, 0, 0, "g0-r0-a0-p2.rows"), tokens=40, turn=2, policy_version=1)
        j.rollout_progress(RolloutRef(g, 1, 0, "g0-r1-a0-p1.rows"), tokens=25, policy_version=2)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    state = restore(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        Journal.open(path, sync="none", resume=state).close()
    return g


def test_log_and_group_show_prefixes(fast_tmp):
    path = str(fast_tmp / "j")
    g = _crashed_and_resumed(path)
    log = cli("log", path).stdout
    assert "rollout_progress" in log and f"rollout={g}/0@0=g0-r0-a0-p2.rows tokens=40 turn=2 policy=1" in log
    text = cli("group", path, str(g)).stdout
    assert "40 tokens turn 2 at LSN 4 (g0-r0-a0-p2.rows)" in text  # attempt 0's latest prefix
    doc = cli_json("group", path, str(g))
    r0 = doc["rollouts"][0]
    assert r0["attempt"] == 1 and r0["attempts"][0]["progress"]["tokens"] == 40
    assert r0["attempts"][1]["progress"] == {"lsn": doc["events"][-1]["lsn"], "locator": "g0-r0-a0-p2.rows",
                                             "tokens": 40, "turn": 2, "policy_version": 1}
    assert "progress" not in doc["rollouts"][2]["attempts"][0]
    kinds = [e["kind"] for e in doc["events"]]
    assert kinds.count("rollout_progress") == 4  # three before the crash, one the resume recorded


def test_audit_counts_prefix_tokens_kept_and_regenerated(fast_tmp):
    path = str(fast_tmp / "j")
    _crashed_and_resumed(path)
    r = audit(path).rollouts
    assert (r["tokens_kept"], r["tokens_regenerated"]) == (40, 25)
    text = cli("audit", path).stdout
    assert "prefix tokens kept" in text and "40" in text and "prefix tokens regenerated" in text
