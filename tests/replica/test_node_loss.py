"""Node loss with the example trainer (README "Object storage", issue 13 test 1): the trainer
journals with `--replica`; it is SIGKILLed at random moments and its local journal directory
deleted (the node is gone), and each restart restores from the bucket alone. Its weights and
data plane stand for shared storage and stay. `journal-demo --replica` runs the same end to
end."""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import signal
import sys
import time

import pytest

from examples import chaos
from examples.bookkeeping import read_acks, read_ledger
from journal import GroupRef, Journal
from replay import audit, restore
from tests.replica.test_replica import train
from tests.support.s3_support import S3, options

KILLS = int(os.environ.get("OJ_NODE_LOSS_KILLS", "12"))
SHIP = 0.2
UPLOAD_SLACK = 1.5   # the upload time on this machine, generously
# a run of 128 steps; with 60 ms rollouts (the median; the deadline 20 times that, past the
# longest) a step takes about 0.9 s, so one life between kills (at most ~5 s) cannot finish
# it; the last run, with 3 ms rollouts, finishes it in seconds
DATASET, EPOCHS, BATCH = 1024, 1, 8
SLOW_MS, FAST_MS = "60", "3"


def trainer_cmd(out, url: str, opts: dict, latency_ms: str) -> list[str]:
    return [sys.executable, "-m", "examples.trainer", "--out", str(out), "--seed", "5",
            "--epochs", str(EPOCHS), "--dataset-size", str(DATASET), "--batch-size", str(BATCH),
            "--rollouts", "4", "--workers", "4", "--ckpt-every", "2", "--latency-ms", latency_ms,
            "--deadline-ms", str(20 * float(latency_ms)),
            "--replica", url, "--replica-options", json.dumps(opts), "--ship-interval", str(SHIP)]


def stderr_tail(out) -> str:
    with open(out / "stderr.log", errors="replace") as f:
        return "".join(f.readlines()[-20:])


def kill_moment(rng: random.Random) -> tuple[str, float]:
    """When to kill: seconds after the trainer announces its restore (one kill in four, while it
    restores and takes the lease over) or after its first training step since it resumed (so
    that, however slow the machine, it acknowledged commits long enough before the kill for
    the bucket's bound to be checked)."""
    if rng.random() < 0.25:
        return "PHASE restore", rng.uniform(0.0, 1.0)
    return "STEP ", rng.uniform(SHIP + UPLOAD_SLACK, 3.5)


def follow(child: chaos.Child, aim: tuple[str, float] | None) -> tuple[list[str], float | None]:
    """Follow `child`, SIGKILLing it `aim[1]` seconds after its line starting with `aim[0]`
    (None: let it finish). Returns its lines and the moment of the kill (None: not killed)."""
    lines, kill_at, killed_at = [], None, None
    while True:
        wait = 300.0 if kill_at is None or killed_at is not None else max(0.0, kill_at - time.monotonic())
        try:
            line = child.lines.get(timeout=wait)
        except queue.Empty:   # the moment of the kill has come
            line = ""
        if kill_at is not None and killed_at is None and time.monotonic() >= kill_at:
            killed_at = time.time()
            child.kill()
        if line is None:
            return lines, killed_at
        lines.append(line)
        if aim is not None and kill_at is None and line.startswith(aim[0]):
            kill_at = time.monotonic() + aim[1]


def test_node_loss_kills_of_the_example_trainer(s3, prefix, tmp_path):
    url, opts = S3.url(prefix), options(s3.endpoint)
    out = tmp_path / "run"
    out.mkdir()
    ledger = out / "ledger.log"
    rng = random.Random(2026)
    resumed, checked = [], 0
    for n in range(KILLS):
        offset = ledger.stat().st_size if ledger.exists() else 0
        child = chaos.Child(trainer_cmd(out, url, opts, SLOW_MS), str(out / "stderr.log"))
        lines, killed_at = follow(child, kill_moment(rng))
        rc = child.close()
        assert killed_at is not None, f"the trainer ended (status {rc}) before kill {n + 1}:\n" + stderr_tail(out)
        assert rc == -signal.SIGKILL, stderr_tail(out)
        shutil.rmtree(out / "journal", ignore_errors=True)  # the node is gone with its disk
        resumed += [line for line in lines if line.startswith("RESUMED")]
        # every commit this run had acknowledged long enough before the kill is in the bucket
        due = [lsn for lsn, t in read_acks(str(ledger), offset) if t <= killed_at - SHIP - UPLOAD_SLACK]
        assert restore(url, replica_options=opts, at="end").lsn >= max(due, default=0), f"kill {n + 1}"
        checked += bool(due)
    assert checked >= KILLS // 4   # enough runs lived long enough for the bound to say something
    child = chaos.Child(trainer_cmd(out, url, opts, FAST_MS), str(out / "stderr.log"))
    lines, _ = follow(child, None)
    assert child.close() == 0 and lines[-1].startswith("DONE"), stderr_tail(out)
    resumed += [line for line in lines if line.startswith("RESUMED")]
    assert len(resumed) > KILLS // 2 and all(" source=replica " in line for line in resumed)
    doc = audit(url, replica_options=opts).to_dict()
    got = chaos.report_from_audit(doc, DATASET, EPOCHS)
    assert (got["trained_twice"], got["lost"], got["in_flight"]) == (0, 0, 0), doc["not_covered"]
    assert got["trained_once"] + got["dropped"] == DATASET * EPOCHS and doc["not_covered"] == []
    assert chaos.compare_reports(got, read_ledger(str(ledger)).report(DATASET, EPOCHS)) == []


def test_a_new_run_with_a_replica_begins_with_a_committed_checkpoint(s3, prefix, tmp_path):
    # so a node lost before its first checkpoint still leaves a checkpoint to resume from: a
    # resume from LSN 0 would start timeline 1 again, over the bucket's own timeline 1
    url, opts = S3.url(prefix), options(s3.endpoint)
    out = tmp_path / "run"
    out.mkdir()
    child = chaos.Child(trainer_cmd(out, url, opts, SLOW_MS), str(out / "stderr.log"))
    lines, killed_at = follow(child, ("STEP 1 ", 0.0))
    assert killed_at is not None and child.close() == -signal.SIGKILL, stderr_tail(out)
    shutil.rmtree(out / "journal")
    state = restore(url, replica_options=opts)
    # LSN 1 records the run identity, LSN 2 the checkpoint of the initial weights
    assert (state.step, state.lsn) == (0, 2)
    assert state.fold_state.identity is not None
    assert (out / "ckpt" / "step_00000000" / "model.pt").exists()


def test_journal_demo_replica_end_to_end(s3, prefix, tmp_path, capsys):
    url, opts = S3.url(prefix), options(s3.endpoint)
    code = chaos.main(["--out", str(tmp_path / "demo"), "--replica", url, "--replica-options", json.dumps(opts),
                       "--kills", "4", "--dataset-size", "128", "--batch-size", "8", "--epochs", "1",
                       "--rollouts", "4", "--json"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    s = json.loads(printed.out)
    assert s["ok"] and (s["twice"], s["lost"]) == (0, 0)
    assert s["audit_source"] == "replay.audit of the bucket" and s["cli_audit"]["path"] == url
    assert s["ledger_mismatches"] == [] and s["cli_audit"]["not_covered"] == []
    assert s["kills"] >= 4 and s["restored_from"] == {"replica": s["restores"]}  # never a local journal
    assert s["audit"]["trained_once"] + s["audit"]["dropped"] == 128


def test_a_bucket_audit_covers_the_rows_taken_before_a_resume_on_a_fresh_node(s3, prefix, tmp_path):
    # the resume's base cut carries the row ledger at its LSN: the new node's history starts
    # there, and the audit of the bucket stands on it
    url, opts = S3.url(prefix), options(s3.endpoint)
    j = Journal.open(str(tmp_path / "node1"), replica=url, replica_options=opts, ship_interval=SHIP)
    train(j, 6)
    j.flush_replica(timeout=30)
    shutil.rmtree(j.path)  # node 1 is gone
    state = restore(url, replica_options=opts)
    j2 = Journal.open(str(tmp_path / "node2"), resume=state, replica=url, replica_options=opts,
                      ship_interval=SHIP)
    gids = j2.taken([GroupRef(idx=6)], loader_state={"pos": 7})
    j2.admitted(gids, target_step=7)
    j2.finished(gids)
    j2.trained(gids, step=7)
    j2.flush_replica(timeout=30)
    j2.close()
    report = audit(url, replica_options=opts)
    assert report.totals["trained_once"] == 7 and report.not_covered == []


def test_journal_demo_refuses_a_replica_it_cannot_use(s3, prefix, tmp_path, capsys):
    for url, why in (("file://" + str(tmp_path / "bucket"), "cannot compare-and-swap"),
                     ("memory://", "lives in one process")):
        assert chaos.main(["--out", str(tmp_path / "a"), "--replica", url]) == 2
        assert why in capsys.readouterr().err
    url, opts = S3.url(prefix), options(s3.endpoint)
    S3.put(s3, prefix, "someone-elses.txt", b"x")
    assert chaos.main(["--out", str(tmp_path / "b"), "--replica", url, "--replica-options", json.dumps(opts)]) == 2
    assert "already holds objects (someone-elses.txt); pick a new prefix" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "b" / "ledger.log")  # no trainer ran


def test_obstore_local_store_still_cannot_compare_and_swap(tmp_path):
    # why journal-demo refuses file://: when obstore implements PutMode::Update for its local
    # store, this fails, and the refusal can go
    import obstore
    from obstore.store import LocalStore
    store = LocalStore(str(tmp_path))
    e_tag = obstore.put(store, "LEASE", b"1", mode="create")["e_tag"]
    with pytest.raises(NotImplementedError, match="PutMode::Update"):
        obstore.put(store, "LEASE", b"2", mode={"e_tag": e_tag})
