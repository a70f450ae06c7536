"""journal-inspect summary, log, group, state, cuts, export, timeline: text and --json, checked
against the journal's own API (Reader, fold, restore), on a real journal with a crash, a
resume, a valid cut, a stale cut and an unfinished compaction."""

from __future__ import annotations

import hashlib

import json
import os
import shutil

import pytest
import zstandard

from journal import Owner, Reader
from journal.layout import LOCK_NAME
from replay import restore
from replay.cli import build_parser
from snapshot import compact

from tests.support.cli_journals import Trainer, Loader
from tests.support.cli_run import cli, cli_many


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> str:
    """Checkpoints every 2 steps; a cut at the end just before the crash (stale once the run
    resumes from step 6), a cut at the latest checkpoint after, and a leftover temp dir."""
    path = str(tmp_path_factory.mktemp("views") / "journal")
    t = Trainer(path, Loader(10))
    t.start()
    for _ in range(7):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
    t.crash()
    compact(path, at="end", retention=None)          # on the branch that dies: stale later
    t.resume()
    for _ in range(5):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
    t.j.close()
    compact(path, retention=None)                    # latest checkpoint: the restore base
    os.makedirs(os.path.join(path, "snapshots", ".tmp-cut-00000002-00000000000000000099-dead"))
    return path


def _fingerprint(path: str) -> dict:
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = (st.st_size, st.st_mtime_ns,
                                                    hashlib.sha256(f.read()).hexdigest())
    return out


def _events(path: str, timeline=None) -> list[tuple]:
    out = []
    for rec in Reader(path).records(timeline=timeline):
        for i, ev in enumerate(rec.commit.events):
            out.append((rec.commit.lsn, rec.timeline, i, type(ev).__struct_config__.tag))
    return out


@pytest.fixture(scope="module")
def runs(journal, tmp_path_factory):
    """Every invocation of this module, run concurrently once; the tests check the results."""
    side = tmp_path_factory.mktemp("side")
    before = _fingerprint(journal)
    reader = Reader(journal)
    valid = next(lsn for lsn, _t, path in __import__("journal.layout").layout.cut_dirs(journal)
                 if lsn == restore(journal).lsn)
    valid_name = f"cut-00000002-{valid:020d}"
    damaged = str(side / "damaged")
    shutil.copytree(journal, damaged)
    with open(os.path.join(damaged, "snapshots", valid_name, "rollout_recovery.pt"), "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    stub = side / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('matplotlib is not installed (test stub)')\n")
    (side / "exists.jsonl").write_text("")
    (side / "empty").mkdir()
    idx = next(g.idx for g in reader.fold().live.values())
    end = reader.fold().lsn
    J = journal
    calls = {
        "summary_json": dict(args=["summary", J], json="doc"),
        "summary_text": dict(args=["summary", J], env={"JOURNAL_INSPECT_PROGRESS_DELAY": "0"}),
        "log_all": dict(args=["log", J], json="lines"),
        "log_range": dict(args=["log", J, "--from", "10", "--to", "30", "--kind", "trained,taken"], json="lines"),
        "log_range_text": dict(args=["log", J, "--from", "10", "--to", "30", "--kind", "trained", "--kind", "taken"]),
        "log_group": dict(args=["log", J, "--group", "5"], json="lines"),
        "log_idx": dict(args=["log", J, "--idx", str(idx), "--task", "math"], json="lines"),
        "log_dead": dict(args=["log", J, "--timeline", "1", "--from", "35"], json="lines"),
        "group_missing": dict(args=["group", J, "999999"], code=1),
        "state_latest": dict(args=["state", J, "--at", "latest-checkpoint"], json="doc"),
        "state_end": dict(args=["state", J, "--at", "end"], json="doc"),
        "state_step": dict(args=["state", J, "--step", "6"], json="doc"),
        "state_lsn": dict(args=["state", J, "--at", str(end - 3), "--owner", "admitted"], json="doc"),
        "state_text": dict(args=["state", J, "--owner", "in_flight,spare"]),
        "state_badstep": dict(args=["state", J, "--step", "99"], code=2),
        "cuts_json": dict(args=["cuts", J], json="doc"),
        "cuts_text": dict(args=["cuts", J]),
        "cuts_damaged": dict(args=["cuts", damaged], json="doc"),
        "cuts_single": dict(args=["cuts", os.path.join(J, "snapshots", valid_name)], json="doc"),
        "export_zst": dict(args=["export", J, "--out", str(side / "events.jsonl.zst")], json="doc"),
        "export_plain": dict(args=["export", J, "--out", str(side / "events.jsonl"), "--from", "20"]),
        "export_exists": dict(args=["export", J, "--out", str(side / "exists.jsonl")], code=2),
        "export_inside": dict(args=["export", J, "--out", os.path.join(J, "x.jsonl")], code=2),
        "timeline_json": dict(args=["timeline", J], json="doc"),
        "timeline_text": dict(args=["timeline", J]),
        "timeline_nompl": dict(args=["timeline", J, "--png", str(side / "x.png")], code=2,
                               env={"PYTHONPATH": str(side / "stub")}),
        "missing": dict(args=["summary", str(side / "nope")], code=2),
        "not_journal": dict(args=["audit", str(side / "empty")], code=2),
        "bad_lsn": dict(args=["log", J, "--from", "x"], code=2),
        "help": dict(args=["audit", "--help"]),
    }
    out = cli_many(calls)
    out["_side"] = side
    out["_idx"] = idx
    out["_end"] = end
    out["_valid_name"] = valid_name
    assert _fingerprint(journal) == before, "journal-inspect changed a file in the journal"
    assert (not os.path.exists(os.path.join(journal, LOCK_NAME))) or LOCK_NAME in before
    return out


def test_summary_text_and_json_match_the_fold(journal, runs):
    doc = runs["summary_json"].doc
    reader = Reader(journal)
    state = reader.fold()
    assert doc["active"]["end_lsn"] == state.lsn
    assert doc["owners"] == {o.name: state.counts[o] for o in Owner}
    assert doc["live_groups"] == len(state.live)
    assert doc["run_id"] == reader.run_id.hex()
    latest = state.latest_committed_checkpoint()
    assert doc["checkpoints"]["latest_committed"] == {"step": latest[0], "lsn": latest[1]}
    assert [t["timeline"] for t in doc["timelines"]] == sorted(reader.timelines)
    assert len(doc["dead_tails"]) == 1 and doc["dead_tails"][0]["commits"] > 0
    counts = {}
    for *_, kind in _events(journal):
        counts[kind] = counts.get(kind, 0) + 1
    assert {k: v for k, v in doc["active"]["events"].items() if v} == counts
    assert doc["cuts"] == {"valid": 1, "stale": 1, "incomplete": 1, "invalid": 0,
                           "newest_valid_lsn": latest[1], "restore_base": runs["_valid_name"],
                           "checked": "checks 1-4 and 8 (contents not loaded)"}
    r = runs["summary_text"]
    assert f"step {latest[0]} at LSN {latest[1]}" in r.stdout
    assert "1 valid, 1 stale, 1 incomplete, 0 invalid" in r.stdout
    assert "dead tail" in r.stdout and "owners at the end of the active history" in r.stdout
    assert r.stderr == ""  # no progress bar when stderr is not a terminal


def test_log_filters_text_and_json(journal, runs):
    all_events = _events(journal)
    key = lambda r: (r["lsn"], r["timeline"], r["index"], r["kind"])  # noqa: E731
    assert [key(r) for r in runs["log_all"].doc] == all_events
    want = [e for e in all_events if 10 <= e[0] <= 30 and e[3] in ("trained", "taken")]
    assert [key(r) for r in runs["log_range"].doc] == want
    text = runs["log_range_text"].stdout.splitlines()
    assert text[0].split() == ["LSN", "TL", "KIND", "GROUPS", "DETAILS"]
    assert len(text) == len(want) + 2 and text[-1] == f"-- {len(want)} event(s)"
    rows = runs["log_group"].doc
    assert rows and all(5 in r["groups"] for r in rows)
    assert rows[0]["kind"] == "taken" and rows[-1]["kind"] == "trained"
    takes = [r for r in runs["log_idx"].doc if r["kind"] == "taken"]
    assert takes and all(any(x["idx"] == runs["_idx"] for x in r["rows"]) for r in takes)
    dead = runs["log_dead"].doc
    assert dead and all(r["timeline"] == 1 for r in dead)
    assert [key(r) for r in dead] == [e for e in _events(journal, timeline=1) if e[0] >= 35]


def test_group_history_on_every_branch(journal, runs):
    reader = Reader(journal)
    dead_gids = set()
    for _t, _cut, recs in reader.dead_tails():
        for rec in recs:
            for ev in rec.commit.events:
                if type(ev).__struct_config__.tag == "finished":
                    dead_gids.update(ev.groups)
    gid = min(dead_gids)  # in flight at the restore point: on the dead tail and the active history
    both = cli_many({"json": dict(args=["group", journal, str(gid)], json="doc"),
                     "text": dict(args=["group", journal, str(gid)])})
    doc = both["json"].doc
    assert doc["found"] and doc["owner"] == reader.fold().owner_of(gid).name
    branches = {e["branch"] for e in doc["events"]}
    assert "active" in branches and any(b.startswith("dead tail") for b in branches)
    assert doc["events"][0]["kind"] == "taken" and doc["row"]["task_name"] == "math"
    mine = [(e["lsn"], e["kind"]) for e in doc["events"] if e["branch"] == "active"]
    assert mine == [(rec.commit.lsn, type(ev).__struct_config__.tag) for rec in reader.records()
                    for ev in rec.commit.events if gid in __import__("replay.cli.event_rows").cli.event_rows.groups_of(ev)]
    text = both["text"].stdout
    assert f"group: {gid}\nrow:" in text and "[dead tail of timeline 1]" in text  # keys aligned
    assert "does not appear" in runs["group_missing"].stderr


def test_state_matches_restore(journal, runs):
    for name, kw in (("state_latest", {}), ("state_end", {"at": "end"}), ("state_step", {"step": 6})):
        doc = runs[name].doc
        rs = restore(journal, **kw)
        assert doc["lsn"] == rs.lsn and doc["step"] == rs.step
        assert doc["counts"] == rs.counts
        # the state at the point, which restore hands back with its rules applied: a group
        # waiting there that a later history admitted comes back under a fresh id
        shown = {(g["group_id"], g["owner"]) for g in doc["groups"]}
        assert shown == {(gid, g.owner.name) for gid, g in rs.fold_state.live.items()}
        reissued = {g.group_id for g in rs.reissued}
        assert len(rs.groups) == len(shown) and len(reissued) == len(rs.reissued)
        assert {(g.group_id, g.owner.name) for g in rs.groups if g.group_id not in reissued} <= shown
        assert doc["loader_state"] == rs.loader_state
    doc = runs["state_lsn"].doc
    assert doc["lsn"] == runs["_end"] - 3 and all(g["owner"] == "ADMITTED" for g in doc["groups"])
    text = runs["state_text"].stdout
    assert "live groups (ADMITTED, RESERVED, SPARE)" in text and "target_step" in text
    assert "no committed checkpoint for step 99" in runs["state_badstep"].stderr


def test_cuts_valid_stale_incomplete_invalid(journal, runs):
    by = {c["status"]: c for c in runs["cuts_json"].doc["cuts"]}
    assert set(by) == {"valid", "stale", "incomplete"}
    assert by["valid"]["restore_base"] and by["stale"]["check"] == 8
    assert by["valid"]["lsn"] == restore(journal).lsn
    text = runs["cuts_text"].stdout
    assert "valid (restore base)" in text and "stale" in text and "incomplete" in text
    bad = next(c for c in runs["cuts_damaged"].doc["cuts"] if c["name"] == runs["_valid_name"])
    assert bad["status"] == "invalid" and bad["check"] == 4 and bad["error"] == "ChecksumMismatch"
    assert [c["status"] for c in runs["cuts_single"].doc["cuts"]] == ["valid"]


def test_export_jsonl_zst(journal, runs):
    side = runs["_side"]
    doc = runs["export_zst"].doc
    assert doc["compressed"] and doc["events"] == len(_events(journal))
    with open(side / "events.jsonl.zst", "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    assert [json.loads(line) for line in data.decode().splitlines()] == runs["log_all"].doc
    assert runs["export_plain"].stdout.startswith("wrote ")
    with open(side / "events.jsonl") as f:
        assert json.loads(f.readline())["lsn"] == 20
    assert "exists" in runs["export_exists"].stderr
    assert "inside the journal" in runs["export_inside"].stderr


def test_timeline_table_json_and_missing_matplotlib(journal, runs):
    steps = runs["timeline_json"].doc["steps"]
    trained = {}
    for rec in Reader(journal).records():
        for ev in rec.commit.events:
            if type(ev).__struct_config__.tag == "trained":
                trained[ev.step] = trained.get(ev.step, 0) + len(ev.groups)
    assert [s["step"] for s in steps] == sorted(trained)
    assert {s["step"]: s["trained_at_step"] for s in steps} == trained
    assert steps[-1]["trained"] == Reader(journal).fold().counts[Owner.TRAINED]
    text = runs["timeline_text"].stdout.splitlines()
    assert text[0].split()[:3] == ["step", "LSN", "in"] and len(text) == 2 + len(steps)
    err = runs["timeline_nompl"].stderr
    assert "--png needs matplotlib" in err and "ownership-journal[plot]" in err
    assert len(err.strip().splitlines()) == 1


def test_timeline_png_with_matplotlib(journal, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "owners.png"
    cli("timeline", journal, "--png", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_user_errors_exit_2_with_one_line(runs):
    side = runs["_side"]
    assert runs["missing"].stderr.strip().splitlines() == [
        f"journal-inspect: error: {side / 'nope'}: no such file or directory"]
    err = runs["not_journal"].stderr
    assert "not a journal directory" in err and len(err.strip().splitlines()) == 1
    assert "an LSN is an integer" in runs["bad_lsn"].stderr


def test_help_on_every_subcommand_has_examples(runs):
    out = runs["help"].stdout
    assert "examples:" in out and "trained" in out
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"summary", "log", "group", "state", "cuts", "verify", "audit", "export",
                                "steps", "timeline", "restores", "rescue"}  # timeline: the alias of steps
    for name, p in sub.choices.items():
        text = p.format_help()
        assert "examples:" in text and "--json" in text and "--mode" in text, name


def test_progress_bar_only_on_a_terminal(journal):
    r = cli("summary", journal, env={"JOURNAL_INSPECT_PROGRESS_DELAY": "0"}, stderr_tty=True)
    assert "summary: active history" in r.stderr and "%" in r.stderr
