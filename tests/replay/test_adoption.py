"""Adoption (docs/recovery.md, "Restoring" step 6): with salvage, the loader's takes on the dead
tail come back under fresh group ids, each where its work allows, with the loader state after
the last adopted take; the resume's first commit records all of it, and the resumed journal
audits clean (a row adopted counts once)."""

from __future__ import annotations

import os

import pytest
import torch

from journal import (Admitted, CheckpointCommitted, Diverted, Finished, GroupRef, Journal, Owner, Reader, RolloutFailed,
                     RolloutRef, RolloutSealed, Taken, TakenGroup)
from replay import DamagedJournalWarning, audit, restore
from tests.support.equality import deep_equal
from tests.support.replay_support import FakeDataPlane, view

S = 4  # the restored checkpoint's step


def _loader(pos: int) -> dict:
    """A loader state with a large tensor leaf (stored as a blob of its segment)."""
    return {"pos": pos, "gen": torch.arange(300, dtype=torch.int64) + pos}


def _refs(idxs, epoch=0):
    return [GroupRef(idx=i, task_name="math", epoch=epoch, fingerprint=b"fp%d" % i) for i in idxs]


def _seal(j, dp, gid, index, pv, *, keep_row=True, attempt=0):
    loc = f"rows/{gid}/{index}/{attempt}"
    if keep_row:
        dp.put(loc)
    j.rollout_sealed([RolloutRef(gid, index, attempt, loc)], policy_version=pv)
    return loc


@pytest.fixture
def crashed(tmp_path):
    """At the checkpoint (step S): `live` admitted with 2 rollouts, none sealed. After it, the
    dead tail: take 1 (a b c d, with a loader state) and take 2 (e f, with one, in epoch 1), then
    take 3 (x, without a loader state). a: rollout 0 sealed by the checkpoint's weights, 1 by
    newer ones, 2 by the checkpoint's but its row lost; then dropped. b: all 3 sealed by the
    checkpoint's weights, finished and trained. c (no rollouts=): finished by the checkpoint's
    weights. d: diverted. e: admitted, its rollout failed once. f: admitted in a's place. live:
    rollout 0 sealed by newer weights."""
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    j = Journal.open(path, sync="none")
    (live,) = j.taken(_refs([0]), loader_state=_loader(1), dataset_size=50)
    j.admitted([live], target_step=S + 1, policy_version=S, rollouts=2)
    lsn = j.begin_checkpoint(step=S)
    j.commit_checkpoint(step=S)
    # -- the dead tail ----------------------------------------------------------------------
    a, b, c, d = j.taken(_refs([1, 2, 3, 4]), loader_state=_loader(5), dataset_size=50)
    j.admitted([a, b], target_step=S + 1, policy_version=S, rollouts=3)
    j.admitted([c], target_step=S + 1, policy_version=S)
    j.diverted([d])
    kept_a = _seal(j, dp, a, 0, S)
    _seal(j, dp, a, 1, S + 1)
    _seal(j, dp, a, 2, S, keep_row=False)
    kept_b = [_seal(j, dp, b, i, S) for i in range(3)]
    j.finished([b])
    dp.put("rows/c")
    j.finished([c], locators=["rows/c"])  # the admitting version (S) holds
    j.trained([b], step=S + 1)
    _seal(j, dp, live, 0, S + 1)
    e, f = j.taken(_refs([0, 1], epoch=1), loader_state=_loader(2))
    j.discarded([a], reason="rollout_failed")
    j.admitted([e], target_step=S + 2, policy_version=S + 1, rollouts=2)
    j.admitted([f], target_step=S + 2, policy_version=S + 1, replaces=a)
    j.rollout_failed([RolloutRef(e, 1, 0)], reason="timeout")
    (x,) = j.taken(_refs([2], epoch=1))  # no loader state: the loader's position after it is unknown
    j.close()
    return path, dp, lsn, dict(live=live, a=a, b=b, c=c, d=d, e=e, f=f, x=x), (kept_a, kept_b)


def _rollouts(g):
    return [(r.index, r.attempt, r.sealed, r.locator, r.policy_version) for r in g.rollouts]


def test_the_dead_tails_takes_come_back_under_fresh_ids_where_their_work_allows(crashed):
    path, dp, lsn, g, (kept_a, kept_b) = crashed
    state = restore(path, data_plane=dp, salvage=True)
    assert (state.lsn, state.step) == (lsn, S)
    # takes 1 and 2, in order, under fresh ids above every id any history used (x's included);
    # take 3 carries no loader state: not adopted, the loader hands x out again
    assert [n.adopted_from for n in state.adopted] == [g[k] for k in "abcdef"]
    new = {k: n for k, n in zip("abcdef", state.adopted)}
    ids = [n.group_id for n in state.adopted]
    assert ids == list(range(g["x"] + 1, g["x"] + 7))
    assert deep_equal(state.loader_state, _loader(2)) and state.loader_epoch == 1
    # a: admitted (its drop does not bind), rollout 0 kept; 1 (newer weights) and 2 (row lost)
    # pending at attempt 0 of the new id
    a = new["a"]
    assert (a.owner, a.target_step, a.policy_version, a.idx) == (Owner.ADMITTED, S + 1, S, 1)
    assert _rollouts(a) == [(0, 0, True, kept_a, S), (1, 0, False, None, None), (2, 0, False, None, None)]
    # b: every rollout kept: to train (its training on the dead tail does not bind either)
    assert new["b"].owner == Owner.REPLAY and [r.locator for r in new["b"].rollouts] == kept_b
    assert (new["c"].owner, new["c"].locator, new["c"].policy_version) == (Owner.REPLAY, "rows/c", S)
    assert new["d"].owner == Owner.SPARE and new["d"].target_step is None
    e = new["e"]
    assert (e.owner, e.epoch, _rollouts(e)) == (Owner.ADMITTED, 1, [(0, 0, False, None, None),
                                                                 (1, 0, False, None, None)])
    assert (new["f"].owner, new["f"].replaces, new["f"].rollouts) == (Owner.ADMITTED, a.group_id, None)
    # the owners' lists: each adopted group in one, the point's own groups as before
    assert {n.group_id for n in state.replay} == {new["b"].group_id, new["c"].group_id}
    assert [n.group_id for n in state.spare] == [new["d"].group_id]
    assert [n.group_id for n in state.admitted] == [g["live"], a.group_id, e.group_id, new["f"].group_id]
    assert state.reserved == []
    assert state.adopted_rollouts == [(a.group_id, 0)] + [(new["b"].group_id, i) for i in range(3)]
    # newer weights: the live group's rollout 0 (not kept: pending, fenced) and a's rollout 1
    assert sorted(state.newer_weights) == sorted([(g["live"], 0), (g["a"], 1)])
    (live,) = [n for n in state.admitted if n.group_id == g["live"]]
    assert [(r.index, r.attempt, r.sealed) for r in live.rollouts] == [(0, 1, False), (1, 1, False)]


def test_the_first_commit_records_the_adoption(crashed):
    path, dp, lsn, g, (kept_a, kept_b) = crashed
    state = restore(path, data_plane=dp, salvage=True)
    new = {k: n.group_id for k, n in zip("abcdef", state.adopted)}
    a, b, c, d, e, f = (new[k] for k in "abcdef")
    # the checkpoint re-marked (its commit marker is after L), the live group's rollouts fenced
    fence = [CheckpointCommitted(S),
             RolloutFailed([RolloutRef(g["live"], 0, 0), RolloutRef(g["live"], 1, 0)], "abandoned_on_restore")]
    taken = state.first_commit[2]
    assert type(taken) is Taken and taken.dataset_size == 50
    assert taken.groups == [TakenGroup(new[k], i, "math", 0, b"fp%d" % i) for k, i in zip("abcd", (1, 2, 3, 4))] \
        + [TakenGroup(new[k], i, "math", 1, b"fp%d" % i) for k, i in zip("ef", (0, 1))]
    assert state.first_commit == fence + [
        taken, Diverted([d]),
        Admitted([a], S + 1, S, None, 3), RolloutSealed([RolloutRef(a, 0, 0, kept_a)], S),
        Admitted([b], S + 1, S, None, 3)] + [RolloutSealed([RolloutRef(b, i, 0, kept_b[i])], S) for i in range(3)] + [
        Finished([b]),
        Admitted([c], S + 1, S, None, None), Finished([c], S, ["rows/c"]),
        Admitted([e], S + 2, S + 1, None, 2),
        Admitted([f], S + 2, S + 1, a, None)]
    j = Journal.open(path, sync="none", resume=state)
    try:
        assert view(j.groups()) == view(state.groups)
        assert deep_equal(j.state_copy().loader.decode(), _loader(2))
        for old in g.values():  # the dead ids stay dead
            assert old == g["live"] or j.owner_of(old) is None
        j.taken(_refs([2], epoch=1), loader_state=_loader(3))  # the loader's next row: x's
    finally:
        j.close()
    # on disk, read strictly (the loader state's blob is in the new branch's segment)
    assert deep_equal(restore(path, at="end").loader_state, _loader(3))
    assert len(Reader(path).timelines) == 2


def test_a_resumed_journal_counts_an_adopted_row_once(crashed):
    path, dp, lsn, g, _ = crashed
    state = restore(path, data_plane=dp, salvage=True)
    with Journal.open(path, sync="none", resume=state) as j:
        (x,) = j.taken(_refs([2], epoch=1), loader_state=_loader(3))
        todo = [n.group_id for n in state.admitted + state.reserved]
        j.admitted([n.group_id for n in state.spare] + [x], target_step=S + 2)
        todo += [n.group_id for n in state.spare] + [x]
        for gid in todo:
            grp = j.group(gid)
            if grp.rollouts is None:
                j.finished([gid], locators=[f"rows/{gid}"])
            else:
                for i in grp.rollouts.unsealed():
                    j.rollout_sealed([RolloutRef(gid, i, grp.rollouts.attempts[i], f"rows/{gid}/{i}")])
                j.finished([gid])
        j.trained([n.group_id for n in state.replay] + todo, step=S + 1)
    report = audit(path)
    assert report.clean, report.to_dict()
    totals = report.to_dict()["totals"]
    # rows 0..4 of epoch 0 and 0..2 of epoch 1, each trained once; the dead tail's x is not
    # pending: the resumed run took row 2 of epoch 1 again
    assert (totals["rows_taken"], totals["trained_once"], totals["lost_count"],
            totals["trained_more_count"], totals["pending_retake"]) == (8, 8, 0, 0, 0)
    # the groups the dead tail finished (b and c) were finished again, adopted: salvaged
    (tail,) = report.to_dict()["dead_tails"]
    assert (tail["finished"], tail["salvaged"], tail["regenerated"]) == (2, 2, 0)


def test_without_salvage_nothing_is_adopted(crashed):
    path, dp, lsn, g, _ = crashed
    for state in (restore(path, data_plane=dp), restore(path, salvage=True)):
        assert state.adopted == [] and state.newer_weights == []
        assert deep_equal(state.loader_state, _loader(1)) and state.loader_epoch == 0
        assert [n.group_id for n in state.groups] == [g["live"]]
        assert not any(type(ev) is Taken for ev in state.first_commit)


def test_a_demotions_retake_on_a_dead_tail_is_not_adopted(tmp_path):
    """A resume that regenerated group X (its rows lost) re-took X's row under a fresh id,
    without a loader state. Restoring an older checkpoint, where X is live, leaves that re-take
    on the dead tail before a later loader take: it is not adopted (X's row would come back
    twice); the later take is."""
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (x,) = j.taken(_refs([0]), loader_state=_loader(1))
        j.admitted([x], target_step=2, policy_version=0)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        j.finished([x], policy_version=1, locators=["rows/x"])  # its row never reaches the data plane
        j.begin_checkpoint(step=2)
        j.commit_checkpoint(step=2)
    first = restore(path, data_plane=dp, salvage=True)
    (demoted,) = first.demoted
    with Journal.open(path, sync="none", resume=first) as j:
        (y,) = j.taken(_refs([1]), loader_state=_loader(2))
    older = restore(path, step=1, data_plane=dp, salvage=True)
    assert [n.adopted_from for n in older.adopted] == [y]
    rows = sorted(n.idx for n in older.groups)
    assert rows == [0, 1]  # X's row once (X itself, live at step 1), Y's once
    assert demoted.group_id not in {n.adopted_from for n in older.adopted}
    assert deep_equal(older.loader_state, _loader(2))


def test_takes_after_damage_in_the_dead_tail_are_not_adopted(tmp_path):
    """A damaged frame in the dead tail may have held a take: the loader state of a later take
    is past it, so a restore reading past the damage adopts only the takes before it."""
    path, dp = str(tmp_path / "journal"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        j.taken(_refs([0]), loader_state=_loader(1))
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        (a,) = j.taken(_refs([1]), loader_state=_loader(2))
        j.taken(_refs([2]), loader_state=_loader(3))
        damaged = j.lsn
        j.taken(_refs([3]), loader_state=_loader(4))
        j.diverted([a])
    rec = next(Reader(path).records(start_lsn=damaged, stop_lsn=damaged))
    with open(os.path.join(path, rec.segment), "r+b") as f:  # a byte of its payload flipped
        f.seek(rec.offset + 16)
        byte = f.read(1)[0]
        f.seek(rec.offset + 16)
        f.write(bytes([byte ^ 0x5A]))
    with pytest.warns(DamagedJournalWarning):
        state = restore(path, data_plane=dp, salvage=True)
    assert [(n.adopted_from, n.owner) for n in state.adopted] == [(a, Owner.SPARE)]
    assert deep_equal(state.loader_state, _loader(2))
