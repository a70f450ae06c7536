"""journal-inspect verify and reading in hard places: a clean journal whose old segments are
archived (.wal.zst), a flipped bit (exit 1, names segment/offset/LSN; salvage still reads), and
a journal that a writer in another process holds open and appends to (inspection works and does
not block)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from journal import Journal, JournalLocked, Reader
from snapshot import compact

from tests.support.cli_journals import clean_run
from tests.support.cli_run import cli_many

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def journals(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    archived = str(root / "archived")
    clean_run(archived, steps_before_crash=31, steps_after=20, segment_bytes=4096)
    res = compact(archived, retention="archive")
    assert res.retired_segments, "the test needs archived segments"
    flipped = str(root / "flipped")
    shutil.copytree(archived, flipped)
    # flip one bit inside a frame in the middle of the first live segment: intact frames follow
    # (retention archived timeline 1 whole: its last segment holds the dead tail of the crash)
    reader = Reader(flipped)
    seg = next(s for s in reader.segments if not s.archived)
    recs = [r for r in reader.records() if r.segment == seg.name]
    victim = recs[len(recs) // 2]
    with open(seg.path, "r+b") as f:
        f.seek(victim.offset + 14)
        b = f.read(1)
        f.seek(victim.offset + 14)
        f.write(bytes([b[0] ^ 0x04]))
    torn = str(root / "torn")
    shutil.copytree(archived, torn)
    last = Reader(torn).segments[-1]
    with open(last.path, "ab") as f:  # half a frame at the end: a torn tail
        f.write(b"\x00\x00\x01\x00torn")
    runs = cli_many({
        "verify_torn": dict(args=["verify", torn]),
        "audit_salvage": dict(args=["audit", flipped, "--mode", "salvage"], code=1),
        "audit_salvage_json": dict(args=["audit", flipped, "--mode", "salvage"], json="doc", code=1),
        "audit_pit": dict(args=["audit", flipped, "--mode", "point_in_time"], code=1),
        "verify_archived": dict(args=["verify", archived]),
        "verify_archived_json": dict(args=["verify", archived], json="doc"),
        "summary_archived": dict(args=["summary", archived], json="doc"),
        "log_archived": dict(args=["log", archived], json="lines"),
        "verify_flipped": dict(args=["verify", flipped], code=1),
        "verify_flipped_json": dict(args=["verify", flipped], json="doc", code=1),
        "summary_flipped": dict(args=["summary", flipped], code=1),
        "summary_salvage": dict(args=["summary", flipped, "--mode", "salvage"]),
        "summary_salvage_json": dict(args=["summary", flipped, "--mode", "salvage"], json="doc"),
        "log_salvage": dict(args=["log", flipped, "--mode", "salvage"]),
        "log_pit": dict(args=["log", flipped, "--mode", "point_in_time"], json="lines"),
    })
    return {"archived": archived, "flipped": flipped, "victim": victim, "segment": seg.name, **runs}


def test_verify_clean_archived_journal(journals):
    assert journals["verify_archived"].stdout.rstrip().endswith("clean")
    doc = journals["verify_archived_json"].doc
    assert doc["clean"] and not doc["problems"]
    assert {c["check"] for c in doc["checks"]} >= {"segment headers", "frames, checksums, chain, LSNs",
                                                   "ownership rules", "cut: checks 1-8 and content",
                                                   "restore point"}
    s = journals["summary_archived"].doc
    assert s["segments"]["archived"] > 0 and s["active"]["first_lsn"] == 1
    want = [(r.commit.lsn, i) for r in Reader(journals["archived"]).records() for i, _ in
            enumerate(r.commit.events)]
    assert [(e["lsn"], e["index"]) for e in journals["log_archived"].doc] == want
    assert any(e["segment"].endswith(".wal.zst") for e in journals["log_archived"].doc)


def test_flipped_bit_names_segment_offset_lsn(journals):
    v = journals["victim"]
    doc = journals["verify_flipped_json"].doc
    assert not doc["clean"]
    (p,) = [p for p in doc["problems"] if p["kind"] == "damaged"]
    assert (p["segment"], p["offset"], p["lsn"]) == (journals["segment"], v.offset, v.commit.lsn)
    text = journals["verify_flipped"].stdout
    assert f"segment {journals['segment']}, offset {v.offset}, LSN {v.commit.lsn}" in text
    # strict reading stops with one line naming the damage and the way around it
    err = journals["summary_flipped"].stderr.strip().splitlines()
    assert len(err) == 1 and journals["segment"] in err[0] and f"offset {v.offset}" in err[0]
    assert "--mode salvage" in err[0]
    # salvage reads around it and says what it skipped
    s = journals["summary_salvage_json"].doc
    assert any(p["kind"] == "damaged" and p["offset"] == v.offset for p in s["problems"])
    assert s["skipped_commits"]
    assert "skipped" in journals["summary_salvage"].stdout
    assert f"offset {v.offset}" in journals["log_salvage"].stderr
    assert journals["log_salvage"].stdout.rstrip().endswith("skipped or torn, see above")
    # point in time ends the history just before the damage
    assert max(e["lsn"] for e in journals["log_pit"].doc) == v.commit.lsn - 1


_WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support.cli_journals import Loader, Trainer
t = Trainer({path!r}, Loader(100000), segment_bytes=1 << 14)
t.start()
for _ in range(20):
    t.step()
t.checkpoint()
print("ready", flush=True)
while True:
    t.step()
    if t.step_no % 10 == 0:
        t.checkpoint()
    time.sleep(0.001)
"""


def test_live_writer_holding_the_lock(tmp_path):
    path = str(tmp_path / "live")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER.format(root=ROOT, path=path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        with pytest.raises(JournalLocked):
            Journal.open(path)
        start = time.monotonic()
        runs = cli_many({
            "summary": dict(args=["summary", path], json="doc"),
            "verify": dict(args=["verify", path], json="doc"),
            "audit": dict(args=["audit", path], json="doc"),
            "log": dict(args=["log", path, "--kind", "checkpoint_committed"], json="lines"),
        })
        assert time.monotonic() - start < 100
        assert writer.poll() is None, "the writer must still be running"
        with pytest.raises(JournalLocked):
            Journal.open(path)  # inspection took no lock and released nothing
        s = runs["summary"].doc
        assert s["active"]["end_lsn"] > 20 and s["owners"]["TRAINED"] > 0
        assert all(p["kind"] == "torn" for p in s["problems"])  # at most a frame mid-append
        assert runs["verify"].doc["clean"]
        assert runs["audit"].doc["clean"]
        assert runs["log"].doc and runs["log"].doc[0]["kind"] == "checkpoint_committed"
    finally:
        writer.kill()
        writer.wait()


def test_verify_names_a_torn_tail_once(journals):
    out = journals["verify_torn"].stdout
    torn = [line for line in out.splitlines() if "torn" in line and "never acknowledged" in line]
    assert torn, out
    assert all(line.count("torn tail") == 1 for line in torn), torn


def test_audit_that_skipped_frames_is_never_clean(journals):
    """A flipped bit in a sealed segment: salvage reads around it, point_in_time stops there;
    either way part of the history was not audited, so the audit is not clean (exit 1)."""
    for name in ("audit_salvage", "audit_pit"):
        out = journals[name].stdout
        assert "CLEAN" not in out, out
        assert "NOT COVERED" in out and journals["segment"] in out, out
    doc = journals["audit_salvage_json"].doc
    assert doc["clean"] is False and doc["complete"] is False
    assert any(journals["segment"] in x for x in doc["not_covered"]), doc["not_covered"]
