"""Test 7: salvage and demotion with a fake data plane (save/has), and what the journal says
after resuming from the salvaged/demoted state."""

from __future__ import annotations

import pytest

from journal import Discarded, Journal, Owner, Reader
from replay import restore
from tests.support.replay_support import FakeDataPlane, locator_of, make_dataset, ref_of, view

S = 5  # the checkpoint's step: weights after step 5
DS = make_dataset(50)


@pytest.fixture
def run(tmp_path):
    """At the checkpoint (LSN L): A B C C2 D H admitted, E F in replay, R reserved. After L:
    B finishes with newer weights, C and C2 finish with rows kept, D finishes but its rows are
    lost, H finishes and is then discarded, N is taken, admitted and finished, F's rows are
    lost. Then the process dies."""
    path = str(tmp_path / "journal")
    dp = FakeDataPlane()
    j = Journal.open(path, sync="none")
    names = ["A", "B", "C", "C2", "D", "H", "E", "F", "R"]
    gids = dict(zip(names, j.taken([ref_of(DS[i]) for i in range(len(names))], loader_state={"pos": 9})))
    g = gids
    j.admitted([g[n] for n in ("A", "B", "C", "C2", "D", "H")], target_step=S + 1, policy_version=S)
    j.admitted([g["E"], g["F"]], target_step=S, policy_version=S - 1)
    for n in ("E", "F"):
        dp.put(locator_of(g[n]))
    j.finished([g["E"], g["F"]], policy_version=S - 1, locators=[locator_of(g["E"]), locator_of(g["F"])])
    lsn = j.begin_checkpoint(step=S)
    j.commit_checkpoint(step=S)
    # -- after L: the dead tail -------------------------------------------------------------
    j.trained([g["E"]], step=S + 1)
    for n, pv in (("B", S + 1), ("C", S), ("D", S), ("H", S)):
        dp.put(locator_of(g[n]))
        j.finished([g[n]], policy_version=pv, locators=[locator_of(g[n])])
    dp.put(locator_of(g["C2"]))
    j.finished([g["C2"]], locators=[locator_of(g["C2"])])  # no version: the admitting one (S) holds
    j.discarded([g["H"]], reason="rollout_failed")
    (n_gid,) = j.taken([ref_of(DS[20])], loader_state={"pos": 21})
    g["N"] = n_gid
    j.admitted([n_gid], target_step=S + 1, policy_version=S)
    dp.put(locator_of(n_gid))
    j.finished([n_gid], policy_version=S, locators=[locator_of(n_gid)])
    dp.lose(locator_of(g["D"]))
    dp.lose(locator_of(g["F"]))
    j.close()
    return path, dp, g, lsn


def _ids(groups):
    return sorted(x.group_id for x in groups)


def test_salvage_and_demotion(run):
    path, dp, g, lsn = run
    state = restore(path, data_plane=dp, salvage=True)
    assert (state.lsn, state.step) == (lsn, S)
    assert _ids(state.salvaged) == sorted([g["C"], g["C2"]])
    for x in state.salvaged:
        assert x.owner == Owner.REPLAY and x.locator == locator_of(x.group_id) and x.policy_version == S
    assert _ids(state.replay) == sorted([g["E"], g["C"], g["C2"]])
    # demoted: F under the fresh id its regeneration gets (beyond every id, dead tail included)
    (new_f,) = state.demoted
    assert new_f.replaces == g["F"] and new_f.group_id > g["N"]
    assert new_f.owner == Owner.ADMITTED and new_f.locator is None
    # admitted, ordered by target_step then group id: the demoted F (step S) first
    assert [x.group_id for x in state.admitted] == [new_f.group_id, g["A"], g["B"], g["D"], g["H"]]
    assert _ids(state.reserved) == [g["R"]]
    # a group taken after L is the loader's again: never looked at, never salvaged
    assert g["N"] not in {x.group_id for x in state.groups}
    assert locator_of(g["N"]) not in dp.has_calls

    plain = restore(path, data_plane=dp)            # salvage is opt-in; demotion is not
    assert plain.salvaged == [] and _ids(plain.replay) == [g["E"]]
    assert [x.replaces for x in plain.demoted] == [g["F"]]
    assert _ids(plain.admitted) == sorted([g[n] for n in ("A", "B", "C", "C2", "D", "H")]
                                          + [plain.demoted[0].group_id])
    blind = restore(path, salvage=True)             # no data plane: nothing to check, nothing moves
    assert blind.salvaged == [] and blind.demoted == [] and _ids(blind.replay) == sorted([g["E"], g["F"]])


def test_resume_records_salvage_and_demotion(run):
    path, dp, g, lsn = run
    state = restore(path, data_plane=dp, salvage=True)
    j = Journal.open(path, sync="none", resume=state)
    # salvaged: finished on the new branch too; demoted: a fresh id admitted, the old one dropped
    assert j.owner_of(g["C"]) == j.owner_of(g["C2"]) == Owner.REPLAY
    assert j.owner_of(g["F"]) == Owner.DROPPED
    (new_f,) = state.demoted
    assert new_f.group_id > g["N"]                  # fresh, beyond every id of the dead tail too
    assert new_f.replaces == g["F"] and j.owner_of(new_f.group_id) == Owner.ADMITTED
    # the journal now says exactly what restore handed out
    assert view(j.groups()) == view(state.groups)
    j.trained([g["C"], g["C2"], g["E"]], step=S + 1)  # the trainer uses the salvaged rows directly
    j.close()
    reconcile = [r for r in Reader(path).records(start_lsn=lsn + 1)][0]
    dropped = [ev for ev in reconcile.commit.events if type(ev) is Discarded]
    assert [(ev.groups, ev.reason) for ev in dropped] == [([g["F"]], "rows_lost_on_restore")]
    after = restore(path, at="end", data_plane=dp)
    assert after.demoted == [] and new_f.group_id in {x.group_id for x in after.admitted}
    assert {x.group_id: x.idx for x in after.admitted}[new_f.group_id] == DS[7]["idx"]


def test_a_replay_group_finished_without_a_locator_is_regenerated_given_a_data_plane(tmp_path):
    """The journal accepts `finished` without locators (it does not know about data planes);
    a restore given one cannot find such a group's rows, so it regenerates the group."""
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        kept, bare = j.taken([ref_of(DS[0]), ref_of(DS[1])], loader_state={"pos": 2})
        j.admitted([kept, bare], target_step=1)
        j.finished([kept], locators=[dp.put(locator_of(kept))])
        j.finished([bare])  # rows written somewhere, but the journal was not told where
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    state = restore(path, data_plane=dp)
    assert _ids(state.replay) == [kept]
    (new,) = state.demoted
    assert new.replaces == bare and new.owner == Owner.ADMITTED and new.idx == DS[1]["idx"]
    assert _ids(restore(path).replay) == [kept, bare]  # without a data plane nothing is checked
