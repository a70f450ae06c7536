"""Cuts carry each rollout (schema 2) and its progress (schema 4): a cut of any rollout
history reads back exactly the fold, loads with weights_only=True, and a rollout table that contradicts its groups is
CorruptRecord."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from journal import GroupRef, Journal, OwnershipError, RolloutRef
from snapshot import CorruptRecord, compact, read_cut


def _history(j: Journal, data) -> None:
    gids = j.taken([GroupRef(idx=i) for i in range(6)])
    for g in gids:
        j.admitted([g], target_step=1, rollouts=data.draw(st.sampled_from((None, 1, 3, 8))))
    for _ in range(data.draw(st.integers(0, 40))):
        g = data.draw(st.sampled_from(gids))
        rec = j.state_copy().live.get(g)
        if rec is None or rec.rollouts is None:
            continue
        i = data.draw(st.integers(0, rec.rollouts.n - 1))
        ref = RolloutRef(g, i, rec.rollouts.attempts[i], f"dp/{g}/{i}")
        try:
            kind = data.draw(st.sampled_from(("seal", "fail", "progress")))
            if kind == "seal":
                j.rollout_sealed([ref], policy_version=data.draw(st.none() | st.integers(0, 3)))
            elif kind == "fail":
                j.rollout_failed([ref], reason="timeout")
            else:
                j.rollout_progress(RolloutRef(g, i, ref.attempt, f"dp/{g}/{i}/p"),
                                   tokens=data.draw(st.integers(0, 2 ** 40)),
                                   turn=data.draw(st.none() | st.integers(0, 9)),
                                   policy_version=data.draw(st.none() | st.integers(0, 3)))
        except OwnershipError:
            pass  # already sealed
    for g in gids:
        rec = j.state_copy().live[g]
        if rec.rollouts is None or rec.rollouts.all_sealed():
            if data.draw(st.booleans()):
                j.finished([g], locators=None if rec.rollouts else [f"dp/{g}"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_cut_of_a_rollout_history_reads_back_the_fold(tmp_path_factory, data):
    d = str(tmp_path_factory.mktemp("j"))
    with Journal.open(d, sync="none") as j:
        _history(j, data)
        cut = read_cut(compact(d, at="end", retention=None).cut_path)
        assert cut.state.same_as(j.state_copy())
        for name in ("rollout_recovery.pt", "replay_buffer_metadata.pt"):
            table = torch.load(os.path.join(cut.path, name), weights_only=True)
            assert table["format_version"] == 5 and "rollout_table" in table and "progress_table" in table


def _cut_with_rollouts(tmp_path) -> str:
    d = str(tmp_path / "j")
    with Journal.open(d, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=1)])
        j.admitted([g], target_step=1, rollouts=3)
        j.rollout_sealed([RolloutRef(g, 1, 0, "dp/1")])
    return compact(d, at="end", retention=None).cut_path


def _rewrite(cut: str, change, key: str = "rollout_table") -> None:
    path = os.path.join(cut, "rollout_recovery.pt")
    table = torch.load(path, weights_only=True)
    change(table[key])
    torch.save(table, path)
    data = open(path, "rb").read()
    mpath = os.path.join(cut, "MANIFEST.json")
    m = json.load(open(mpath))
    m["files"]["rollout_recovery.pt"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(mpath, "w") as f:
        json.dump(m, f)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(index=torch.tensor([0, 2, 1], dtype=torch.int16)), "indices"),
    (lambda t: t.update(attempt=torch.tensor([0, -1, 0], dtype=torch.int32)), "attempts"),
    (lambda t: t.update(index=torch.tensor([0, 1, 2])), "int16 tensor of 3"),
    (lambda t: t.update(sealed=torch.tensor([True, False, False])),
     "rollout 1 is unsealed with a locator .a prefix., but the prefix columns hold only 0"),
    (lambda t: t.update(group_id=torch.tensor([0, 0])), "int64 tensor of 3"),
])
def test_a_rollout_table_that_contradicts_its_group_is_corrupt(tmp_path, change, message):
    cut = _cut_with_rollouts(tmp_path)
    assert read_cut(cut).state.live[0].rollouts.is_sealed(1)
    _rewrite(cut, change)
    with pytest.raises(CorruptRecord, match=message):
        read_cut(cut)


def _cut_with_progress(tmp_path) -> str:
    d = str(tmp_path / "j")
    with Journal.open(d, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=1)])
        j.admitted([g], target_step=1, rollouts=3)
        j.rollout_sealed([RolloutRef(g, 1, 0, "dp/1")])
        j.rollout_progress(RolloutRef(g, 2, 0, "dp/2/p"), tokens=7, turn=1, policy_version=0)
    return compact(d, at="end", retention=None).cut_path


@pytest.mark.parametrize("key, change, message", [
    ("progress_table", lambda t: t.update(tokens=torch.tensor([-1])), "negative tokens"),
    ("progress_table", lambda t: t.update(turn=torch.tensor([1, 2])), "int64 tensors of one length"),
    ("progress_table", lambda t: t.update(tokens=torch.tensor([1, 2]), turn=torch.tensor([1, 2])),
     "2 prefix tokens for 1 prefixes"),
    ("progress_table", lambda t: t.pop("turn"), "progress_table layout"),
    ("rollout_table", lambda t: t.update(sealed=torch.tensor([False, False, False])),
     "rollout 2 is unsealed with a locator .a prefix., but the prefix columns hold only 1"),
    ("rollout_table", lambda t: t.update(policy_version=torch.tensor([3, -(2 ** 63), -(2 ** 63)])),
     "rollout 0 is unsealed with a policy version but no locator"),
])
def test_a_progress_table_that_contradicts_its_rollouts_is_corrupt(tmp_path, key, change, message):
    cut = _cut_with_progress(tmp_path)
    p = read_cut(cut).state.live[0].rollouts.progress_of(2)
    assert (p.locator, p.tokens, p.turn, p.policy_version) == ("dp/2/p", 7, 1, 0)
    _rewrite(cut, change, key)
    with pytest.raises(CorruptRecord, match=message):
        read_cut(cut)
