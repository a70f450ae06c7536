"""journal-inspect audit: exactly-once per loader epoch, checked against an independent count over
the journal's own Reader, on a clean history with a crash and a correct resume (exit 0), a resume
with an older loader state (rows trained twice, exit 1) and one with a newer loader state (rows
lost on the dead tail, exit 1)."""

from __future__ import annotations

import pytest

from journal import Discarded, Reader, Taken, Trained

from tests.support.cli_journals import clean_run, double_train_run, lost_rows_run
from tests.support.cli_run import cli_many


def _oracle(path: str) -> dict:
    """Per row (epoch, task, idx) on the active history: groups trained, dropped, live at the end."""
    reader = Reader(path)
    row_of, trained, dropped = {}, {}, {}
    for rec in reader.records():
        for ev in rec.commit.events:
            if type(ev) is Taken:
                for g in ev.groups:
                    row_of[g.group_id] = (g.epoch, g.task_name, g.idx)
            elif type(ev) is Trained:
                for gid in ev.groups:
                    trained[row_of[gid]] = trained.get(row_of[gid], 0) + 1
            elif type(ev) is Discarded:
                for gid in ev.groups:
                    dropped[row_of[gid]] = ev.reason
    live = {(g.epoch, g.task_name, g.idx) for g in reader.fold().live.values()}
    return {"rows": set(row_of.values()), "trained": trained, "dropped": dropped, "live": live}


@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit")
    clean, dbl, lost = str(root / "clean"), str(root / "double"), str(root / "lost")
    clean_run(clean)
    double_train_run(dbl)
    _t, lost_rows = lost_rows_run(lost)
    out = cli_many({
        "clean_text": dict(args=["audit", clean]),
        "clean_json": dict(args=["audit", clean], json="doc"),
        "double_text": dict(args=["audit", dbl], code=1),
        "double_json": dict(args=["audit", dbl], json="doc", code=1),
        "lost_text": dict(args=["audit", lost], code=1),
        "lost_json": dict(args=["audit", lost], json="doc", code=1),
    })
    out["paths"] = {"clean": clean, "double": dbl, "lost": lost}
    out["lost_rows"] = lost_rows
    return out


def test_clean_history_exit_0(audits):
    path = audits["paths"]["clean"]
    o = _oracle(path)
    doc = audits["clean_json"].doc
    assert doc["clean"] and doc["totals"]["trained_more_count"] == 0 and doc["totals"]["lost_count"] == 0
    once = sum(1 for r, n in o["trained"].items() if n == 1)
    assert doc["totals"]["trained_once"] == once
    in_flight = {r for r in o["live"] if r not in o["trained"]}
    assert doc["totals"]["in_flight"] == len(in_flight)
    dropped = {r for r in o["dropped"] if r not in o["trained"] and r not in o["live"]}
    assert doc["totals"]["dropped"] == len(dropped) > 0
    assert {k for d in doc["epochs"] for k in d["dropped"]} == {"rollout_failed"}
    assert [d["epoch"] for d in doc["epochs"]] == sorted({r[0] for r in o["rows"]})
    # the restore threw away the dead tail's work: it is reported per restore
    (tail,) = doc["dead_tails"]
    reader = Reader(path)
    (t, cut, recs), = list(reader.dead_tails())
    recs = list(recs)
    assert (tail["timeline"], tail["restored_at_lsn"], tail["commits"]) == (t, cut, len(recs))
    finished = sum(len(ev.groups) for r in recs for ev in r.commit.events
                   if type(ev).__struct_config__.tag == "finished")
    assert tail["finished"] == finished > 0 and tail["regenerated"] == finished and tail["salvaged"] == 0
    text = audits["clean_text"].stdout
    assert "CLEAN: no row trained twice, no row lost" in text and "work held by dead tails" in text


def test_planted_double_train_exit_1_rows_listed(audits):
    o = _oracle(audits["paths"]["double"])
    twice = {r for r, n in o["trained"].items() if n >= 2}
    assert twice  # the planted bug happened
    doc = audits["double_json"].doc
    assert not doc["clean"]
    listed = {(r["epoch"], r["task_name"], r["idx"]) for d in doc["epochs"] for r in d["trained_more"]}
    assert listed == twice
    for d in doc["epochs"]:
        for r in d["trained_more"]:
            assert r["times"] == 2 and len([g for g in r["groups"] if "trained_step" in g]) == 2
    text = audits["double_text"].stdout
    assert f"rows trained more than once: {len(twice)}" in text
    for _e, _task, idx in twice:
        assert f"idx {idx} (2 times)" in text
    assert "PROBLEMS:" in text


def test_planted_loss_exit_1_rows_listed(audits):
    doc = audits["lost_json"].doc
    assert not doc["clean"]
    listed = [(r["epoch"], r["idx"]) for d in doc["epochs"] for r in d["lost"]]
    assert sorted(listed) == sorted(audits["lost_rows"])
    assert all(r["where"] == "dead tail" for d in doc["epochs"] for r in d["lost"])
    o = _oracle(audits["paths"]["lost"])
    assert not any((e, "math", i) in o["rows"] for e, i in audits["lost_rows"])  # never re-taken
    text = audits["lost_text"].stdout
    assert f"lost rows (taken, never trained, not dropped, not live at the end): {len(listed)}" in text
    for e, i in audits["lost_rows"]:
        assert f"epoch {e} task math idx {i}:" in text
