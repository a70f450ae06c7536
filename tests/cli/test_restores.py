"""`replay.restores` and `journal-inspect restores`: one row per restore in the history, dead
histories included, with what each cost: the crash point, the checkpoint restored, the work kept by
lead, what was dropped and why, the rollouts handed back to generate, and the generation seconds
of the dropped rows that recorded theirs."""

from __future__ import annotations

import json

import pytest

from journal import GroupRef, Journal, RolloutRef
from replay import LocalDataPlane, restore, restores
from tests.support.cli_run import cli

S = 3


@pytest.fixture(scope="module")
def two_restores(fast_tmp_module):
    """A checkpoint of step S; the dead run seals rollouts 0 and 1 of a group by weights S+1
    (rows recording 2.5 s and 4 s of generation); a restore with max_policy_lag=1 keeps both and
    resumes; that history dies before its next checkpoint; a restore with the lag 0 drops both
    and resumes: two restores, the first one's history dead."""
    path, rows = str(fast_tmp_module / "j"), str(fast_tmp_module / "rows")
    dp = LocalDataPlane(rows)
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=S + 1, policy_version=S, rollouts=3)
        j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        for i, seconds in ((0, 2.5), (1, 4.0)):
            loc = dp.put_rollout(g, i, 0, {"tokens": [i], "seconds": seconds})
            j.rollout_sealed([RolloutRef(g, i, 0, loc)], policy_version=S + 1)
        crash = j.lsn
    first = restore(path, data_plane=dp, salvage=True, max_policy_lag=1)
    Journal.open(path, sync="none", resume=first).close()
    second = restore(path, data_plane=dp, salvage=True)
    Journal.open(path, sync="none", resume=second).close()
    return path, first, crash


def test_every_restore_is_listed_with_what_it_kept_and_dropped(two_restores):
    path, first, crash = two_restores
    kept, dropped = restores(path).restores
    assert (kept.timeline, kept.point, kept.step, kept.crash_lsn, kept.active) == (2, first.lsn, S, crash, False)
    assert kept.max_policy_lag == 1 and kept.dropped == {} and kept.regenerate == 1
    assert {lead: (w.rollouts, w.prefixes) for lead, w in kept.kept.items()} == {1: (2, 0)}
    assert kept.seconds_lost is None
    # the second restore read the first's history as its dead tail: the same seals, re-recorded
    assert (dropped.timeline, dropped.point, dropped.crash_lsn, dropped.active) == (3, first.lsn, first.lsn + 1, True)
    assert dropped.max_policy_lag == 0 and dropped.dropped == {"beyond_lag": 2} and dropped.regenerate == 3
    assert dropped.kept == {} and dropped.seconds_lost == pytest.approx(6.5)
    assert kept.time <= dropped.time


def test_journal_inspect_restores_prints_them(two_restores):
    path, first, crash = two_restores
    doc = json.loads(cli("restores", path, "--json").stdout)
    assert [(r["timeline"], r["point"], r["crash_lsn"], r["active"]) for r in doc["restores"]] == [
        (2, first.lsn, crash, False), (3, first.lsn, first.lsn + 1, True)]
    assert doc["restores"][0]["kept"] == {"1": {"groups": 0, "rollouts": 2, "prefixes": 0, "tokens": 0}}
    text = cli("restores", path).stdout
    assert "lead 1: 2 rollouts" in text and "beyond_lag 2" in text and "6.5" in text and "dead" in text


def test_a_journal_never_restored_has_no_row(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        j.taken([GroupRef(idx=0)])
    assert restores(path).restores == []
    assert "no restore" in cli("restores", path).stdout
