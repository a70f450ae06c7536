"""A group admitted with rollouts=N whose N rollouts are all sealed at the restore point, while
`finished` was never journaled (or only after the checkpoint, on the dead tail): it comes back
to train (in `replay`, reported in `completed`), never as an admitted group with nothing
pending (a trainer dispatching `pending` would wait for it forever); the resume's first commit
finishes it. And the audit of a finished run that still holds groups in flight says so, and
`journal-inspect audit --expect-drained` fails it until the run is drained."""

from __future__ import annotations

import pytest

from journal import Finished, GroupRef, Journal, Owner, RolloutRef
from replay import audit, restore
from tests.support.cli_run import cli, cli_json
from tests.support.replay_support import FakeDataPlane

N = 3
STEP = 4


def _loc(g: int, i: int) -> str:
    return f"tq/{g}/{i}"


def _killed(path: str, dp: FakeDataPlane, *, finished_after: bool) -> tuple[int, int]:
    """g1 trained before the checkpoint; g2 admitted with N rollouts, all sealed before the
    checkpoint, never finished before it (`finished_after`: finished on the dead tail). Returns
    (g2, checkpoint LSN)."""
    with Journal.open(path, sync="none") as j:
        g1, g2 = j.taken([GroupRef(idx=1), GroupRef(idx=2)], loader_state={"pos": 2})
        j.admitted([g1], target_step=STEP, policy_version=STEP - 1)
        j.finished([g1], policy_version=STEP - 1, locators=["tq/g1"])
        j.trained([g1], step=STEP)
        j.admitted([g2], target_step=STEP + 1, policy_version=STEP - 1, rollouts=N)
        for i in range(N):
            dp.put(_loc(g2, i))
            j.rollout_sealed([RolloutRef(g2, i, 0, _loc(g2, i))], policy_version=STEP - 1)
        lsn = j.begin_checkpoint(step=STEP)
        j.commit_checkpoint(step=STEP)
        if finished_after:
            j.finished([g2], policy_version=STEP - 1)
    return g2, lsn


@pytest.mark.parametrize("finished_after", [False, True], ids=["never-finished", "finished-after"])
@pytest.mark.parametrize("salvage", [False, True], ids=["plain", "salvage"])
def test_all_sealed_group_comes_back_to_train(tmp_path, finished_after, salvage):
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    g2, lsn = _killed(path, dp, finished_after=finished_after)
    state = restore(path, data_plane=dp if salvage else None, salvage=salvage)
    assert state.lsn == lsn and state.step == STEP
    assert all(g.pending for g in state.admitted), "an admitted group with nothing to dispatch"
    assert state.admitted == []
    assert [g.group_id for g in state.replay] == [g2]
    assert [g.group_id for g in state.completed] == [g2] and state.salvaged == []
    (g,) = state.replay
    assert g.owner == Owner.REPLAY and g.target_step == STEP + 1
    assert [(r.index, r.sealed, r.locator) for r in g.rollouts] == [(i, True, _loc(g2, i)) for i in range(N)]
    # the first commit re-marks the checkpoint committed (its marker is after L) and finishes g2
    assert [ev for ev in state.first_commit if type(ev) is Finished] == [Finished([g2])]

    with Journal.open(path, sync="none", resume=state) as j:
        assert j.owner_of(g2) == Owner.REPLAY  # the first commit finished it
        j.trained([g2], step=STEP + 1)
        j.begin_checkpoint(step=STEP + 1)
        j.commit_checkpoint(step=STEP + 1)
    again = restore(path)
    assert again.groups == [] and again.step == STEP + 1
    report = audit(path)
    assert report.clean and report.drained, report.in_flight


def test_a_lost_row_still_demotes_the_group(tmp_path):
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    g2, _lsn = _killed(path, dp, finished_after=False)
    dp.lose(_loc(g2, 1))
    state = restore(path, data_plane=dp)
    assert state.completed == [] and state.replay == []
    (g,) = state.admitted
    assert g.replaces == g2 and [r.index for r in g.pending] == [1]


def test_a_cut_restores_it_the_same_way(tmp_path):
    from snapshot import compact
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    g2, _lsn = _killed(path, dp, finished_after=False)
    cut = compact(path, retention=None).cut_path
    state = restore(cut)
    assert [g.group_id for g in state.replay] == [g2] == [g.group_id for g in state.completed]
    assert state.admitted == []


def _finished_run(path: str) -> tuple[int, int]:
    """A run that ended (its last checkpoint committed, the journal closed) with g2's rollouts all
    sealed but the group never finished, and one spare left in the reserve. Returns (g2, spare)."""
    with Journal.open(path, sync="none") as j:
        g1, g2, spare = j.taken([GroupRef(idx=i, epoch=0) for i in (1, 2, 3)], loader_state={"pos": 3})
        j.diverted([spare])
        j.admitted([g1], target_step=1)
        j.finished([g1], locators=["tq/g1"])
        j.trained([g1], step=1)
        j.admitted([g2], target_step=2, rollouts=N)
        j.rollout_sealed([RolloutRef(g2, i, 0, _loc(g2, i)) for i in range(N)])
        j.begin_checkpoint(step=2)
        j.commit_checkpoint(step=2)
    return g2, spare


def test_audit_says_what_is_still_in_flight(tmp_path):
    path = str(tmp_path / "journal")
    g2, spare = _finished_run(path)
    report = audit(path)
    assert report.clean  # nothing trained twice, nothing lost ...
    assert not report.drained  # ... but not drained, and the report says so
    assert report.in_flight["groups"] == 2
    assert report.in_flight["by_owner"] == {"ADMITTED": 1, "SPARE": 1}
    assert report.in_flight["sealed_not_finished"] == [g2]
    doc = cli_json("audit", path)  # exactly-once holds: exit 0 without --expect-drained
    assert doc["drained"] is False and doc["in_flight"]["sealed_not_finished"] == [g2]
    text = cli("audit", path).stdout
    assert "CLEAN" in text and "2 group(s) still in flight" in text
    assert f"group {g2}" in text and "never finished" in text
    out = cli("audit", path, "--expect-drained", code=1).stdout
    assert "NOT DRAINED" in out

    # drained: the restore finishes g2 (it comes back to train), the spare is dropped
    state = restore(path)
    assert [g.group_id for g in state.replay] == [g2] and [g.group_id for g in state.spare] == [spare]
    with Journal.open(path, sync="none", resume=state) as j:
        j.trained([g2], step=3)
        j.discarded([spare], reason="unused_spare")
        j.begin_checkpoint(step=3)
        j.commit_checkpoint(step=3)
    report = audit(path)
    assert report.clean and report.drained and report.in_flight["groups"] == 0
    assert cli_json("audit", path, "--expect-drained")["drained"] is True
    assert "CLEAN" in cli("audit", path, "--expect-drained").stdout


def test_expect_drained_fails_a_run_with_rows_in_flight_only_on_a_spare(tmp_path):
    """A spare is in flight: its row was taken from the loader and is neither trained nor
    dropped."""
    path = str(tmp_path / "journal")
    with Journal.open(path, sync="none") as j:
        g1, spare = j.taken([GroupRef(idx=1, epoch=0), GroupRef(idx=2, epoch=0)])
        j.diverted([spare])
        j.admitted([g1], target_step=1)
        j.finished([g1], locators=["tq/g1"])
        j.trained([g1], step=1)
    assert audit(path).in_flight["by_owner"] == {"SPARE": 1}
    cli("audit", path, "--expect-drained", code=1)
    with Journal.open(path, sync="none") as j:
        j.discarded([spare], reason="unused_spare")
    cli("audit", path, "--expect-drained", code=0)
