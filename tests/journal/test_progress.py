"""`rollout_progress` (DESIGN 12), rule by rule: the fence of a seal (group ADMITTED with
rollouts=N, index in range, the current attempt, unsealed), a newer prefix of the same attempt
supersedes the older, a seal or a failure ends it, `discarded` takes it with the group; a
refused call names group, rollout and attempt and writes nothing; every entry point
(`Journal`, `Transaction`, `AsyncJournal`); a reopen folds back the same prefixes."""

from __future__ import annotations

import asyncio

import pytest

from journal import (AsyncJournal, GroupRef, Journal, Owner, OwnershipError, Progress, Reader,
                     RolloutEnded, RolloutRef, StaleAttempt)
from tests.support.journal_model import tree_bytes


def _admitted(j: Journal, n: int | None = 3) -> int:
    (g,) = j.taken([GroupRef(idx=j.state_copy().next_group_id)])
    j.admitted([g], target_step=1, policy_version=0, rollouts=n)
    return g


def _prefix(j: Journal, g: int, index: int) -> Progress | None:
    rec = j.state_copy().live.get(g)
    return rec.rollouts.progress_of(index) if rec is not None and rec.rollouts is not None else None


@pytest.fixture
def j(fast_tmp):
    with Journal.open(str(fast_tmp / "j"), sync="none") as journal:
        yield journal


def test_a_prefix_is_recorded_and_a_newer_one_of_the_attempt_supersedes_it(j):
    g = _admitted(j)
    j.rollout_progress(RolloutRef(g, index=2, attempt=0, locator="p1"), tokens=1536, turn=None, policy_version=7)
    assert _prefix(j, g, 2) == Progress("p1", 1536, None, 7)
    assert _prefix(j, g, 0) is None and _prefix(j, g, 1) is None
    j.rollout_progress(RolloutRef(g, 2, 0, "p2"), tokens=2048, turn=3)
    # the newer prefix of the same attempt extends the older one's tokens: it keeps their version
    assert _prefix(j, g, 2) == Progress("p2", 2048, 3, 7)
    j.rollout_progress(RolloutRef(g, 2, 0, "p3"), tokens=4096, turn=4, policy_version=9)
    assert _prefix(j, g, 2) == Progress("p3", 4096, 4, 9, since=7)


@pytest.mark.parametrize("end", ["seal", "fail"])
def test_a_seal_or_a_failure_ends_the_prefix(j, end):
    g = _admitted(j)
    j.rollout_progress(RolloutRef(g, 0, 0, "p0"), tokens=5)
    j.rollout_progress(RolloutRef(g, 1, 0, "p1"), tokens=9)
    if end == "seal":
        j.rollout_sealed([RolloutRef(g, 0, 0, "r0")])
    else:
        j.rollout_failed([RolloutRef(g, 0, 0)], reason="timeout")
    assert _prefix(j, g, 0) is None
    assert _prefix(j, g, 1) == Progress("p1", 9)  # the other rollout keeps its own
    j.rollout_failed([RolloutRef(g, 1, 0)], reason="timeout")
    assert j.state_copy().live[g].rollouts.progress is None  # none left: the group holds none


def test_discarded_takes_the_prefixes_with_the_group(j):
    g = _admitted(j)
    j.rollout_progress(RolloutRef(g, 0, 0, "p0"), tokens=5)
    j.discarded([g], reason="bad prompt")
    assert j.owner_of(g) == Owner.DROPPED and g not in j.state_copy().live
    with pytest.raises(OwnershipError, match=f"rollout_progress of group {g} requires owner ADMITTED"):
        j.rollout_progress(RolloutRef(g, 0, 0, "p1"), tokens=6)


def _refused(path: str, j: Journal, call, cls, words: list[str]):
    lsn, before = j.lsn, tree_bytes(path)
    with pytest.raises(cls) as info:
        call()
    for w in words:
        assert w in str(info.value), str(info.value)
    assert j.lsn == lsn and tree_bytes(path) == before, "a refused prefix changed the journal"
    return info.value


def test_the_fence_of_a_seal_refuses_naming_group_rollout_and_attempt(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        g = _admitted(j)
        plain = _admitted(j, None)
        (reserved,) = j.taken([GroupRef(idx=99)])
        j.rollout_failed([RolloutRef(g, 1, 0)], reason="timeout")  # rollout 1 now at attempt 1
        j.rollout_sealed([RolloutRef(g, 2, 0, "r2")])
        stale = _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 1, 0, "late"), tokens=3),
                         StaleAttempt, [f"group {g} rollout 1", "attempt 0", "current attempt is 1"])
        assert (stale.group_id, stale.index, stale.attempt, stale.current) == (g, 1, 0, 1)
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 1, 2, "early"), tokens=3),
                 StaleAttempt, ["attempt 2", "never dispatched"])
        ended = _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 2, 0, "after"), tokens=3),
                         RolloutEnded, [f"group {g} rollout 2 attempt 0", "sealed"])
        assert (ended.group_id, ended.index, ended.attempt) == (g, 2, 0)
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 3, 0, "x"), tokens=3),
                 OwnershipError, ["index out of range", "3 rollouts"])
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(plain, 0, 0, "x"), tokens=3),
                 OwnershipError, [f"group {plain}", "without rollouts="])
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(reserved, 0, 0, "x"), tokens=3),
                 OwnershipError, [f"group {reserved}", "owner is RESERVED"])
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 0, 0), tokens=3),
                 ValueError, ["needs the locator", "nothing was written"])
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 0, 0, "x"), tokens=-1),
                 ValueError, ["argument tokens", "-1"])
        _refused(path, j, lambda: j.rollout_progress(RolloutRef(g, 0, 0, "x"), tokens=1, turn=-2),
                 ValueError, ["argument turn", "-2"])
        _refused(path, j, lambda: j.rollout_progress([RolloutRef(g, 0, 0, "x")], tokens=1),
                 TypeError, ["takes one RolloutRef"])


def test_a_transaction_with_a_refused_prefix_writes_nothing_of_it(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        g = _admitted(j)
        before = tree_bytes(path)
        with pytest.raises(StaleAttempt):
            with j.transaction() as tx:
                tx.rollout_progress(RolloutRef(g, 0, 0, "p0"), tokens=4)
                tx.rollout_progress(RolloutRef(g, 1, 5, "p1"), tokens=4)
        assert tree_bytes(path) == before and _prefix(j, g, 0) is None
        with j.transaction() as tx:  # a prefix and the seal of the same rollout: the seal ends it
            tx.rollout_progress(RolloutRef(g, 0, 0, "p0"), tokens=4)
            tx.rollout_sealed([RolloutRef(g, 0, 0, "r0")])
            tx.rollout_progress(RolloutRef(g, 1, 0, "p1"), tokens=8)
        assert _prefix(j, g, 0) is None and _prefix(j, g, 1) == Progress("p1", 8)


def test_async_journal_records_a_prefix(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        g = _admitted(j)

        async def go():
            return await AsyncJournal(j).rollout_progress(RolloutRef(g, 1, 0, "p"), tokens=12, turn=2,
                                                          policy_version=1)
        lsn = asyncio.run(go())
        assert lsn == j.lsn and _prefix(j, g, 1) == Progress("p", 12, 2, 1)


def test_a_reopen_and_a_strict_read_fold_back_the_same_prefixes(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        gids = [_admitted(j, 4) for _ in range(5)]
        for k in range(60):
            g, i = gids[k % 5], k % 4
            if _prefix(j, g, i) is None or k % 3:
                j.rollout_progress(RolloutRef(g, i, 0, f"p{k}"), tokens=k, turn=k % 2 or None, policy_version=k)
        want = j.state_copy()
    assert Reader(path, "strict").fold().same_as(want)
    with pytest.warns(Warning):
        with Journal.open(path, sync="none") as j:
            assert j.state_copy().same_as(want)
