"""Text listings of `journal-inspect` are capped (the first 20, then how many were left out and
the flag that shows all); `--all` shows every item and `--json` is never capped."""

from __future__ import annotations

import pytest

from journal import GroupRef, Journal

from cli_run import cli_many

REPEATS = 25      # row 0 taken and trained this many times: 25 groups in its audit line
CHECKPOINTS = 30  # committed checkpoints in the summary


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("listings") / "journal")
    j = Journal.open(path, sync="none")
    for step in range(1, max(REPEATS, CHECKPOINTS) + 1):
        if step <= REPEATS:
            with j.transaction() as tx:
                gids = tx.taken([GroupRef(idx=0, task_name="math", epoch=0)])
                tx.admitted(gids, target_step=step, policy_version=step)
                tx.finished(gids, policy_version=step)
                tx.trained(gids, step=step)
        if step <= CHECKPOINTS:
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
    j.close()
    return cli_many({
        "summary": dict(args=["summary", path]),
        "summary_all": dict(args=["summary", path, "--all"]),
        "summary_json": dict(args=["summary", path], json="doc"),
        "audit": dict(args=["audit", path], code=1),
        "audit_all": dict(args=["audit", path, "--all"], code=1),
        "audit_json": dict(args=["audit", path], json="doc", code=1),
    })


def _line(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.lstrip().startswith(start))


def test_summary_caps_the_checkpoints(runs):
    line = _line(runs["summary"].stdout, "checkpoints:")
    assert line.count("step ") == 20 and f"... {CHECKPOINTS - 20} more (--all shows every one)" in line
    assert _line(runs["summary_all"].stdout, "checkpoints:").count("step ") == CHECKPOINTS
    assert len(runs["summary_json"].doc["checkpoints"]["committed"]) == CHECKPOINTS


def test_audit_caps_the_groups_of_a_row(runs):
    line = _line(runs["audit"].stdout, "epoch 0 task math idx 0")
    assert line.count("group ") == 20 and f"... {REPEATS - 20} more (--all shows every one)" in line
    assert _line(runs["audit_all"].stdout, "epoch 0 task math idx 0").count("group ") == REPEATS
    (row,) = [r for d in runs["audit_json"].doc["epochs"] for r in d["trained_more"]]
    assert row["times"] == REPEATS and len(row["groups"]) == REPEATS
