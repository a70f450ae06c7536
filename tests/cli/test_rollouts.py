"""journal-inspect on groups admitted with `rollouts=N`: `group ID` shows each rollout's attempts
and seals, `log --kind rollout_sealed,rollout_failed` lists and renders those events, and
`audit` adds the rollout figures and checks; each checked against the journal's own Reader, on
a run with failed-and-retried rollouts, a crash and a resume (whose fences abandon the unsealed
rollouts of the groups in flight)."""

from __future__ import annotations

import pytest

from journal import Reader, RolloutFailed, RolloutSealed

from tests.support.cli_run import cli_many
from tests.support.rollout_journals import RolloutTrainer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("rollouts") / "journal")
    t = RolloutTrainer(path)
    t.run(7)
    t.resume()
    t.run(3)
    t.j.close()
    events = [(rec.commit.lsn, ev) for rec in Reader(path).records() for ev in rec.commit.events
              if type(ev) in (RolloutSealed, RolloutFailed)]
    # a group of the step the crash threw away: abandoned on restore, then failed and sealed
    fenced = next(r.group_id for _, ev in events if type(ev) is RolloutFailed
                  and ev.reason == "abandoned_on_restore" for r in ev.rollouts)
    out = cli_many({
        "group_text": dict(args=["group", path, str(fenced)]),
        "group_json": dict(args=["group", path, str(fenced)], json="doc"),
        "log_text": dict(args=["log", path, "--kind", "rollout_sealed,rollout_failed"]),
        "log_json": dict(args=["log", path, "--kind", "rollout_sealed", "--kind", "rollout_failed"],
                         json="lines"),
        "audit_text": dict(args=["audit", path]),
        "audit_json": dict(args=["audit", path], json="doc"),
    })
    return path, events, fenced, out


def _attempts_oracle(events, gid: int) -> dict[int, list[tuple]]:
    """Per rollout index of `gid`: (attempt, "sealed"/"failed", lsn) in order."""
    out: dict[int, list[tuple]] = {}
    for lsn, ev in events:
        for r in ev.rollouts:
            if r.group_id == gid:
                out.setdefault(r.index, []).append(
                    (r.attempt, "sealed" if type(ev) is RolloutSealed else "failed", lsn))
    return out


def test_group_shows_each_rollouts_attempts_and_seals(run):
    path, events, gid, out = run
    doc = out["group_json"].doc
    want = _attempts_oracle(events, gid)
    got = {r["index"]: [(a["attempt"], "sealed" if "sealed_lsn" in a else "failed",
                         a.get("sealed_lsn", a.get("failed_lsn"))) for a in r["attempts"]]
           for r in doc["rollouts"]}
    assert got == want
    assert all(r["sealed"] for r in doc["rollouts"]) and doc["owner"] == "TRAINED"
    assert any(a.get("reason") == "abandoned_on_restore" for r in doc["rollouts"] for a in r["attempts"])
    rollout_events = [e for e in doc["events"] if e["kind"].startswith("rollout_")]
    assert rollout_events and all(ref["group_id"] == gid for e in rollout_events for ref in e["rollouts"])
    text = out["group_text"].stdout
    assert "rollouts (3, on the active history)" in text
    assert "failed at LSN" in text and "(abandoned_on_restore)" in text and f"(dp/{gid}/0)" in text


def test_log_lists_the_rollout_events(run):
    path, events, gid, out = run
    rows = out["log_json"].doc
    assert [(r["lsn"], r["kind"]) for r in rows] == [(lsn, type(ev).__struct_config__.tag) for lsn, ev in events]
    first = rows[0]
    ev = events[0][1]
    assert first["rollouts"] == [{"group_id": r.group_id, "index": r.index, "attempt": r.attempt,
                                  "locator": r.locator} for r in ev.rollouts]
    assert first["groups"] == sorted({r.group_id for r in ev.rollouts})
    text = out["log_text"].stdout
    assert f"-- {len(events)} event(s)" in text
    assert "reason=timeout" in text and f"rollout={gid}/" in text


def test_audit_has_the_rollout_figures_and_checks(run):
    path, events, gid, out = run
    r = out["audit_json"].doc["rollouts"]
    seals = [ref for _, ev in events if type(ev) is RolloutSealed for ref in ev.rollouts]
    fails = [(ev.reason, ref) for _, ev in events if type(ev) is RolloutFailed for ref in ev.rollouts]
    assert r["sealed"] == len(seals) and r["regenerated"] == sum(x.attempt > 0 for x in seals) > 0
    assert r["failed"] == len(fails)
    assert r["abandoned_on_restore"] == sum(reason == "abandoned_on_restore" for reason, _ in fails) > 0
    assert r["groups_trained"] == out["audit_json"].doc["groups"]["trained"]
    assert r["violations"] == [] and out["audit_json"].doc["clean"]
    assert any("fenced late results" in x for x in r["not_counted"])
    text = out["audit_text"].stdout
    assert f"regenerated:               {r['regenerated']} (sealed at an attempt > 0)" in text
    assert "no rollout trained twice:  ok" in text and "all N sealed when trained: ok" in text
    assert "not counted: fenced late results" in text
