"""`replay.audit` on journals without their head: one whose head was retired with
`retention="delete"` and one resumed from a cut into an empty directory count exactly what the
same history audited in full counts, standing on the row ledger the cut carries; a cut without
a ledger (written before cuts carried one) makes the audit report what it could not cover."""

from __future__ import annotations

import os
import shutil

import pytest

from journal import (Admitted, Commit, Finished, Reader, RolloutFailed, RolloutRef, RolloutSealed, Taken,
                     TakenGroup, Trained)
from journal.layout import LEDGER_FILE, cut_dirs
from replay import audit
from snapshot import compact, read_cut
from snapshot.cut import write_cut
from snapshot.row_ledger import RowLedger

from tests.support.cli_run import cli
from tests.support.rollout_journals import RolloutTrainer


def _counts(rep) -> dict:
    d = rep.to_dict()
    return {"epochs": d["epochs"], "totals": d["totals"], "groups": d["groups"], "rollouts": d["rollouts"]}


def _rollout_oracle(path: str) -> dict:
    """Rollout figures counted straight from the active history's events."""
    out = {"sealed": 0, "regenerated": 0, "abandoned_on_restore": 0}
    for rec in Reader(path).records():
        for ev in rec.commit.events:
            if type(ev) is RolloutSealed:
                out["sealed"] += len(ev.rollouts)
                out["regenerated"] += sum(r.attempt > 0 for r in ev.rollouts)
            elif type(ev) is RolloutFailed and ev.reason == "abandoned_on_restore":
                out["abandoned_on_restore"] += len(ev.rollouts)
    return out


def _first_lsn(path: str) -> int:
    return next(iter(Reader(path).records())).commit.lsn


@pytest.fixture
def retired(tmp_path):
    """A run with a crash after step 7 and a resume from step 6's checkpoint, compacted with
    retention="delete"; `full` is a copy taken before the compaction."""
    path, full = str(tmp_path / "journal"), str(tmp_path / "full")
    t = RolloutTrainer(path)
    t.run(7)
    t.resume()
    t.run(7)
    t.j.close()
    shutil.copytree(path, full)
    compact(path, retention="delete", keep_cuts=1)
    return path, full


def test_audit_after_retention_delete_counts_what_the_full_history_counts(retired):
    path, full = retired
    assert _first_lsn(path) > 1 and _first_lsn(full) == 1  # the head is gone
    rep, whole = audit(path), audit(full)
    assert _counts(rep) == _counts(whole)
    assert rep.clean and whole.clean
    assert rep.active["base_lsn"] >= _first_lsn(path) - 1 and rep.active["base_cut"] is not None
    assert whole.active["base_lsn"] == 0
    oracle = _rollout_oracle(full)
    assert {k: rep.rollouts[k] for k in oracle} == oracle
    assert oracle["regenerated"] > 0 and oracle["abandoned_on_restore"] > 0
    assert rep.totals["trained_once"] > 0 and rep.totals["trained_more_count"] == 0


def test_audit_of_a_journal_resumed_from_a_cut_into_an_empty_directory(tmp_path):
    src, twin = str(tmp_path / "src"), str(tmp_path / "twin")
    t = RolloutTrainer(src)
    t.run(7)
    t.j.close()
    shutil.copytree(src, twin)
    cut = str(tmp_path / "ckpt" / "step_6" / "ownership")
    compact(src, into=cut)
    assert LEDGER_FILE in read_cut(cut).manifest.files
    # the same history twice: resumed in place (audited in full) and from the cut elsewhere
    whole = RolloutTrainer(twin, source=twin)
    whole.run(5)
    whole.j.close()
    empty = str(tmp_path / "resumed")
    os.mkdir(empty)
    moved = RolloutTrainer(empty, source=cut)
    moved.run(5)
    moved.j.close()
    assert _first_lsn(empty) > 1
    rep, full = audit(empty), audit(twin)
    # The resume in place raises attempts above what the dead tail dispatched (it reads it);
    # the cut alone cannot see that tail, so its fence may take fewer rounds: the failure
    # counts that the fence adds may differ, everything else is the same history.
    fence_counts = ("failed", "abandoned_on_restore")
    strip = lambda c: {**c, "rollouts": {k: v for k, v in c["rollouts"].items() if k not in fence_counts}}
    assert strip(_counts(rep)) == strip(_counts(full))
    assert rep.clean and rep.complete
    assert rep.active["base_lsn"] == read_cut(cut).lsn
    assert 0 < rep.rollouts["abandoned_on_restore"] <= full.rollouts["abandoned_on_restore"]


def _rewrite_base(path: str, ledger: RowLedger | None) -> str:
    """Write the oldest cut again with `ledger` (None: as a cut from before ledgers)."""
    _lsn, _tl, cut_path = cut_dirs(path)[-1]
    cut = read_cut(cut_path)
    shutil.rmtree(cut_path)
    write_cut(cut_path, cut.state, run_id=bytes.fromhex(cut.manifest.run_id), timeline=cut.timeline,
              ledger=ledger)
    return cut_path


def test_a_cut_without_a_ledger_is_reported_not_covered(retired):
    path, full = retired
    cut_path = _rewrite_base(path, None)
    rep = audit(path)
    assert not rep.complete and not rep.clean
    assert any(cut_path in x and "no row ledger" in x for x in rep.not_covered)
    # what it did read it counts: only rows taken after the cut, none of them twice
    assert 0 < rep.totals["rows_taken"] < audit(full).totals["rows_taken"]
    assert rep.totals["trained_more_count"] == rep.totals["lost_count"] == 0


def test_a_rollout_violation_in_the_ledger_makes_the_audit_fail(retired):
    path, _full = retired
    _lsn, _tl, cut_path = cut_dirs(path)[-1]
    cut = read_cut(cut_path)
    ledger = RowLedger.of_cut(cut)
    ledger.violations.append({"check": "rollout trained twice", "group_id": 3, "index": 1, "seals": 2,
                              "trained_lsn": 9, "trained_step": 2})
    _rewrite_base(path, ledger)
    rep = audit(path)
    assert rep.complete and not rep.clean and rep.problems == 1
    assert rep.rollouts["violations"][0]["group_id"] == 3
    out = cli("audit", path, code=1)
    assert "rollout trained twice" in out.stdout and "group 3 rollout 1" in out.stdout


def test_the_ledger_finds_a_rollout_sealed_twice_and_a_group_trained_unsealed():
    """The checks themselves, on commits the ownership fold would refuse."""
    ledger = RowLedger()
    ledger.add(Commit(1, [Taken([TakenGroup(0, 5, "t", 0), TakenGroup(1, 6, "t", 0)])]))
    ledger.add(Commit(2, [Admitted([0, 1], target_step=1, rollouts=2)]))
    ledger.add(Commit(3, [RolloutSealed([RolloutRef(0, 0, 0), RolloutRef(0, 1, 0), RolloutRef(1, 0, 0)])]))
    ledger.add(Commit(4, [RolloutSealed([RolloutRef(0, 1, 1)])]))
    ledger.add(Commit(5, [Finished([0, 1]), Trained([0, 1], step=1)]))
    checks = [(v["check"], v["group_id"]) for v in ledger.violations]
    assert checks == [("rollout trained twice", 0), ("trained without all rollouts sealed", 1)]
    assert ledger.violations[1]["unsealed"] == [1]
    assert (ledger.rollouts["sealed"], ledger.rollouts["regenerated"]) == (4, 1)
    assert ledger.rows(0, "t").trained.get(5) == 1


def test_the_ledger_reads_back_from_a_cut_exactly(retired):
    path, full = retired
    cut = read_cut(cut_dirs(path)[-1][2])
    ledger = RowLedger.of_cut(cut)
    ledger.rows(None, None).taken.add(5 << 21)  # a sparse outlier and the None keys
    ledger.reasons.append("x")
    back = RowLedger.decode(ledger.encode(), "test", cut.state)
    for key, rows in ledger.tables.items():
        for name in ("taken", "trained", "dropped"):
            a, b = getattr(rows, name), getattr(back.tables[key], name)
            assert (bytes(a.dense).rstrip(b"\0"), a.sparse) == (bytes(b.dense), b.sparse)
    assert (back.reasons, back.groups, back.rollouts, back.lsn) == (ledger.reasons, ledger.groups,
                                                                     ledger.rollouts, cut.lsn)
