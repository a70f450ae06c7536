"""Text listings of `journal-inspect` are capped (the first 20, then how many were left out and
the flag that shows all); `--all` shows every item and `--json` is never capped. A row asked
for with `log --idx` is shown first in its taken event; "row" and "locator" keep one meaning."""

from __future__ import annotations

import subprocess

import pytest

from journal import GroupRef, Journal

from tests.support.cli_run import COMMAND, cli_many

REPEATS = 25      # row 0 taken and trained this many times: 25 groups in its audit line
CHECKPOINTS = 30  # committed checkpoints in the summary
BATCH = [1834, 396, 7, 8, 9, 10, 11, 12, 13, 14, 41]  # row 41 comes after the 8 idx a line shows


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
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
    with j.transaction() as tx:
        batch = tx.taken([GroupRef(idx=i, task_name="math", epoch=1) for i in BATCH])
        tx.admitted(batch, target_step=REPEATS + 1, policy_version=REPEATS)
    j.close()
    return path, batch


@pytest.fixture(scope="module")
def runs(journal):
    path, batch = journal
    return cli_many({
        "log_idx": dict(args=["log", path, "--idx", "41", "--task", "math"]),
        "log_idx_json": dict(args=["log", path, "--idx", "41", "--task", "math"], json="lines"),
        "group": dict(args=["group", path, str(batch[-1])]),
        "group_json": dict(args=["group", path, str(batch[-1])], json="doc"),
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


def test_log_idx_shows_the_row_asked_for_first(runs):
    taken = next(line for line in runs["log_idx"].stdout.splitlines() if " taken " in line)
    assert "idx=[41],1834,396," in taken and "(+3 more)" in taken


def test_row_means_a_dataset_row_everywhere(runs):
    (taken,) = [e for e in runs["log_idx_json"].doc if e["kind"] == "taken"]
    assert "locators" not in taken and [r["idx"] for r in taken["rows"]] == BATCH
    doc = runs["group_json"].doc
    assert "locator" not in doc and doc["row"] == {"idx": 41, "task_name": "math", "epoch": 1,
                                                   "fingerprint": None}
    assert "row:   idx=41, task_name=math, epoch=1\n" in runs["group"].stdout


def test_output_cut_short_by_its_reader_is_quiet(journal):
    """`journal-inspect log J | head -1`: the pipe closes early; no error line, exit 0."""
    p = subprocess.Popen([*COMMAND, "log", journal[0]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    _out, err = p.communicate(timeout=60)
    assert first.split()[:2] == [b"LSN", b"TL"]
    assert err == b"" and p.returncode == 0, err
