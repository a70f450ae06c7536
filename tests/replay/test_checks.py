"""The chain of checks of a cut (snapshot.checks.CHECKS), one test per check, each provoked on a real cut
or journal. Every error must be its own class, a subclass of `replay.RestoreError`, and
name the culprit (file, LSN or group). Checks 5 and 7 on the `.pt` tables run where the tables
are loaded: `read_cut` (verify's read of a cut); a restore takes the state from the cut's
journal state file instead, once every file's sha256 matched (tests/replay/test_restart_seek.py)."""

from __future__ import annotations

import io
import json
import os
import shutil

import pytest
import torch

import replay
from journal import GroupRef, Journal, Reader, format as fmt
from journal.events import Commit, Trained, commit_encoder
from replay import restore
from tests.support.replay_support import collate, locator_of, make_dataset, ref_of
from snapshot import compact, read_cut

STEP = 3


def _raises(cls, fn, *culprits):
    """Assert `fn()` raises exactly `cls` (a RestoreError) naming every culprit; return it."""
    assert issubclass(cls, replay.RestoreError)
    with pytest.raises(replay.RestoreError) as info:
        fn()
    assert type(info.value) is cls, f"{type(info.value).__name__}: {info.value}"
    for c in culprits:
        assert str(c) in str(info.value), f"{c!r} not named in: {info.value}"
    return info.value


@pytest.fixture
def world(tmp_path):
    """A journal with a group in every owner, a committed checkpoint, a cut of it in the
    journal's snapshots/ and one in a trainer checkpoint directory."""
    path = str(tmp_path / "journal")
    ds = make_dataset(20)
    j = Journal.open(path, sync="none")
    gids = j.taken([ref_of(ds[i]) for i in range(8)],
                   loader_state={"pos": 8, "gen": torch.arange(300, dtype=torch.int64)})
    reserved, admitted, replay_g, spare, trained, dropped = gids[0], gids[1], gids[2], gids[3], gids[4], gids[5]
    j.diverted([spare])
    j.admitted([admitted, replay_g, trained, dropped], target_step=STEP, policy_version=STEP - 1)
    j.finished([replay_g, trained], policy_version=STEP - 1,
               locators=[locator_of(replay_g), locator_of(trained)])
    j.trained([trained], step=STEP)
    j.discarded([dropped], reason="rollout_failed")
    lsn = j.begin_checkpoint(step=STEP)
    j.commit_checkpoint(step=STEP)
    j.admitted([gids[6]], target_step=STEP + 1)  # a tail after the checkpoint
    j.close()
    snap = compact(path, retention=None).cut_path
    ckpt = str(tmp_path / "ckpt" / f"step_{STEP}" / "ownership")
    compact(path, into=ckpt, retention=None)
    return {"path": path, "ds": ds, "lsn": lsn, "snap": snap, "cut": ckpt, "gids": gids,
            "reserved": reserved, "admitted": admitted, "replay": replay_g, "spare": spare}


def _manifest(cut: str) -> dict:
    with open(os.path.join(cut, "MANIFEST.json")) as f:
        return json.load(f)


def _write_manifest(cut: str, m: dict) -> None:
    with open(os.path.join(cut, "MANIFEST.json"), "w") as f:
        json.dump(m, f)


def _rewrite_table(cut: str, name: str, mutate) -> None:
    """Load a table file, let `mutate` change it, save it and re-hash it in the manifest (so the
    damage gets past the checksum check and must be caught by a later one)."""
    full = os.path.join(cut, name)
    table = torch.load(full, weights_only=True)
    mutate(table)
    buf = io.BytesIO()
    torch.save(table, buf)
    data = buf.getvalue()
    with open(full, "wb") as f:
        f.write(data)
    import hashlib
    m = _manifest(cut)
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _write_manifest(cut, m)


def test_clean_cut_and_journal_restore(world):
    a = restore(world["cut"])
    b = restore(world["path"])
    assert a.lsn == b.lsn == world["lsn"] and a.step == b.step == STEP
    assert b.base_cut == world["snap"] and a.source == "cut"
    assert [g.group_id for g in a.spare] == [world["spare"]]


# 1 -------------------------------------------------------------------------------------------

def test_manifest_missing(world):
    os.unlink(os.path.join(world["cut"], "MANIFEST.json"))
    _raises(replay.ManifestMissing, lambda: restore(world["cut"]), world["cut"], "MANIFEST.json")


def test_manifest_unparseable(world):
    with open(os.path.join(world["cut"], "MANIFEST.json"), "wb") as f:
        f.write(b'{"format": "ownership-journal-cut", "schema_ver')
    _raises(replay.ManifestMissing, lambda: restore(world["cut"]), "MANIFEST.json")


# 2 -------------------------------------------------------------------------------------------

def test_missing_file(world):
    os.unlink(os.path.join(world["cut"], "replay_buffer_metadata.pt"))
    _raises(replay.MissingFile, lambda: restore(world["cut"]), "replay_buffer_metadata.pt")


# 3 -------------------------------------------------------------------------------------------

def test_orphan_file(world):
    with open(os.path.join(world["cut"], "stray_from_another_run.pt"), "wb") as f:
        f.write(b"x")
    _raises(replay.OrphanFile, lambda: restore(world["cut"]), "stray_from_another_run.pt")


# 4 -------------------------------------------------------------------------------------------

def test_checksum_mismatch_before_any_unpickling(world, monkeypatch):
    loads = []
    real_load = torch.load

    def counting_load(*args, **kwargs):
        loads.append(args)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    read_cut(world["cut"])
    assert loads, "the patch must see the loads of a clean read of the tables"
    loads.clear()
    full = os.path.join(world["cut"], "rollout_recovery.pt")
    data = bytearray(open(full, "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: a torn or stale file
    with open(full, "wb") as f:
        f.write(data)
    _raises(replay.ChecksumMismatch, lambda: restore(world["cut"]), "rollout_recovery.pt")
    _raises(replay.ChecksumMismatch, lambda: read_cut(world["cut"]), "rollout_recovery.pt")
    assert loads == [], "torch.load ran before the hash check"


# 5 -------------------------------------------------------------------------------------------

def test_schema_mismatch_manifest(world):
    m = _manifest(world["cut"])
    m["schema_version"] = 99
    _write_manifest(world["cut"], m)
    _raises(replay.SchemaMismatch, lambda: restore(world["cut"]), world["cut"], "99")


def test_schema_mismatch_table(world):
    _rewrite_table(world["cut"], "rollout_recovery.pt", lambda t: t.update(format_version=7))
    _raises(replay.SchemaMismatch, lambda: read_cut(world["cut"]), "rollout_recovery.pt", "format_version 7")


# 6 -------------------------------------------------------------------------------------------

def test_count_mismatch(world):
    m = _manifest(world["cut"])
    m["counts"]["ADMITTED"] += 1  # as if the table had been truncated
    _write_manifest(world["cut"], m)
    _raises(replay.CountMismatch, lambda: restore(world["cut"]), "rollout_recovery.pt", "ADMITTED")


# 7 -------------------------------------------------------------------------------------------

def test_corrupt_record(world):
    def negative_idx(t):
        t["idx"][0] = -5
    _rewrite_table(world["cut"], "rollout_recovery.pt", negative_idx)
    first = torch.load(os.path.join(world["cut"], "rollout_recovery.pt"), weights_only=True)["group_id"][0]
    _raises(replay.CorruptRecord, lambda: read_cut(world["cut"]), "rollout_recovery.pt",
            f"group {int(first)}")


def test_corrupt_record_phase(world):
    def replay_phase_in_ledger(t):
        t["phase"][0] = 3  # a REPLAY record inside rollout_recovery.pt
    _rewrite_table(world["cut"], "rollout_recovery.pt", replay_phase_in_ledger)
    _raises(replay.CorruptRecord, lambda: read_cut(world["cut"]), "rollout_recovery.pt", "phase")


def test_two_owners(world):
    admitted = world["admitted"]
    ledger = torch.load(os.path.join(world["cut"], "rollout_recovery.pt"), weights_only=True)
    row = ledger["group_id"].tolist().index(admitted)

    def add_to_replay(t):  # the admitted group also appears in the replay buffer's table
        for name in ("group_id", "idx", "epoch", "target_step", "policy_version", "replaces",
                     "rollouts"):  # (the group tracks no rollouts: its rollout_table rows are none)
            t[name] = torch.cat([t[name], ledger[name][row:row + 1]])
        t["phase"] = torch.cat([t["phase"], torch.tensor([3], dtype=torch.int8)])
        for name in ("task_name", "fingerprint", "locator"):
            col, src = t[name], ledger[name]
            a, b = src["offsets"][row].item(), src["offsets"][row + 1].item()
            piece = src["data"][a:b] if name != "locator" else torch.tensor(list(b"tq/x"), dtype=torch.uint8)
            n = len(piece)
            col["data"] = torch.cat([col["data"], piece])
            col["offsets"] = torch.cat([col["offsets"], col["offsets"][-1:] + n])
            col["present"] = torch.cat([col["present"], torch.tensor([True])])
        t["count"] += 1
    _rewrite_table(world["cut"], "replay_buffer_metadata.pt", add_to_replay)
    m = _manifest(world["cut"])
    m["counts"]["REPLAY"] += 1
    _write_manifest(world["cut"], m)
    err = _raises(replay.TwoOwners, lambda: restore(world["cut"]), f"group {admitted}",
                  "rollout_recovery.pt", "replay_buffer_metadata.pt")
    assert isinstance(err, replay.CorruptRecord)


# 8 -------------------------------------------------------------------------------------------

def test_journal_mismatch_stale_cut(world):
    """A cut of a branch that is dead now: an error when named, skipped when not."""
    path = world["path"]
    end_cut = compact(path, at="end", retention=None).cut_path   # on timeline 1, after the checkpoint
    state = restore(path)                                        # back to the checkpoint
    with Journal.open(path, sync="none", resume=state) as j:     # a new branch from there
        for i in range(4):
            j.taken([GroupRef(100 + i)])
    end_lsn = int(os.path.basename(end_cut).split("-")[2])
    _raises(replay.JournalMismatch, lambda: restore(end_cut), end_cut, f"LSN {end_lsn}", "stale")
    later = restore(path, at="end")
    assert end_cut in [s.path for s in later.skipped]
    assert any("JournalMismatch" in s.reason for s in later.skipped if s.path == end_cut)


def test_journal_mismatch_other_run(world, tmp_path):
    other = str(tmp_path / "other")
    with Journal.open(other, sync="none") as j:
        j.taken([GroupRef(1)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    snaps = os.path.join(other, "snapshots")
    os.makedirs(snaps)
    foreign = os.path.join(snaps, os.path.basename(world["snap"]))
    shutil.copytree(world["snap"], foreign)
    run_id = Reader(other).run_id.hex()
    _raises(replay.JournalMismatch, lambda: restore(foreign), foreign, run_id)
    assert foreign in [s.path for s in restore(other).skipped]


# 9 -------------------------------------------------------------------------------------------

def test_journal_corrupt(world):
    path = world["path"]
    shutil.rmtree(world["snap"])  # else the cut covers the damage: restore does not need it
    recs = list(Reader(path).records())
    victim = recs[len(recs) // 2]          # a frame in the middle: intact frames follow it
    seg = os.path.join(path, victim.segment)
    data = bytearray(open(seg, "rb").read())
    data[victim.offset + fmt.FRAME_HEADER_SIZE + 1] ^= 0x40
    with open(seg, "wb") as f:
        f.write(data)
    err = _raises(replay.JournalCorrupt, lambda: restore(path), victim.segment,
                  f"LSN {victim.commit.lsn}", f"offset {victim.offset}")
    assert err.lsn == victim.commit.lsn


def test_ownership_error_in_tail(world):
    """A frame that checksums and chains but trains a RESERVED group: the replay fold refuses it."""
    path = world["path"]
    last = list(Reader(path).records())[-1]
    bad_lsn = last.commit.lsn + 1
    record = commit_encoder.encode(Commit(bad_lsn, [Trained([world["reserved"]], STEP)]))
    frame, _ = fmt.encode_frame([record], last.chain)
    with open(os.path.join(path, last.segment), "ab") as f:
        f.write(frame)
    restore(path)  # the bad commit is after the checkpoint: not replayed, not an error
    err = _raises(replay.OwnershipError, lambda: restore(path, at="end"), f"LSN {bad_lsn}",
                  f"group {world['reserved']}", "RESERVED")
    assert (err.lsn, err.group_id) == (bad_lsn, world["reserved"])


# 10 ------------------------------------------------------------------------------------------

def test_row_missing(world):
    shrunk = world["ds"][:3]
    first_lost = next(g for g in restore(world["path"]).groups if g.idx >= len(shrunk))
    _raises(replay.RowMissing, lambda: restore(world["path"], dataset=shrunk, collate_fn=collate),
            f"group {first_lost.group_id}", f"dataset[{first_lost.idx}]")


def test_row_mismatch(world):
    reordered = list(reversed(world["ds"]))
    _raises(replay.RowMismatch, lambda: restore(world["path"], dataset=reordered, collate_fn=collate),
            f"group {world['reserved']}", "reordered")


def test_row_changed(world):
    edited = [dict(r) for r in world["ds"]]
    victim = world["admitted"]
    idx = world["gids"].index(victim)  # taken from ds[i] in order
    edited[idx]["problem"] = "an edited prompt under the same idx"
    _raises(replay.RowChanged, lambda: restore(world["path"], dataset=edited, collate_fn=collate),
            f"group {victim}", f"dataset[{idx}]")
