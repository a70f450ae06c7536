"""Calls that say nothing or break the checkpoint protocol are refused at append time, with an
error naming the call and nothing written: an event naming no group or rollout, a seal
without the locator of its result, a checkpoint of a negative step, of a step below a
committed one, or begun while another begun by this writer is not committed yet. On every
entry point: `Journal`, `Transaction`, `AsyncJournal`. Replay reads histories written
before these rules unchanged (they are not ownership rules: restore does not depend on them)."""

from __future__ import annotations

import asyncio
import re

import pytest

from journal import (AsyncJournal, CheckpointBegun, Commit, GroupRef, Journal, OwnershipError, RolloutRef,
                     Trained)
from journal.fold import fold
from replay import restore
from tests.support.journal_model import tree_bytes

EMPTY = {  # call -> how to make it with nothing to name
    "taken": lambda o, g: o.taken([]),
    "diverted": lambda o, g: o.diverted([]),
    "admitted": lambda o, g: o.admitted([], target_step=1),
    "finished": lambda o, g: o.finished([]),
    "trained": lambda o, g: o.trained([], step=1),
    "discarded": lambda o, g: o.discarded([], reason="x"),
    "rollout_sealed": lambda o, g: o.rollout_sealed([]),
    "rollout_failed": lambda o, g: o.rollout_failed([], reason="x"),
}


def _via(entry: str, j: Journal, call):
    """Run `call(obj)` on the journal itself, inside a transaction, or awaited on AsyncJournal."""
    if entry == "journal":
        return call(j)
    if entry == "transaction":
        with j.transaction() as tx:
            return call(tx)
    return asyncio.run(call(AsyncJournal(j)))


def _refused(path: str, j: Journal, entry: str, call, cls, words: str):
    """Assert `call` via `entry` raises `cls` with `words` and leaves the journal as it was."""
    lsn, before = j.lsn, tree_bytes(path)
    with pytest.raises(cls) as info:
        _via(entry, j, call)
    assert re.search(words, str(info.value)), str(info.value)
    assert path in str(info.value) and "nothing was written" in str(info.value)
    assert j.lsn == lsn and tree_bytes(path) == before
    return info.value


ENTRIES = ["journal", "transaction", "async"]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_an_event_naming_nothing_is_refused(fast_tmp, name, entry):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        _refused(path, j, entry, lambda o: EMPTY[name](o, g), ValueError,
                 re.escape(f"{name}() argument ") + ".*at least one")
        j.admitted([g], target_step=1)  # still usable


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_seal_without_the_locator_of_its_result_is_refused(fast_tmp, entry):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.admitted([g], target_step=1, rollouts=2)
        refs = [RolloutRef(g, 0, 0, locator="dp/0"), RolloutRef(g, 1, 0)]
        _refused(path, j, entry, lambda o: o.rollout_sealed(refs), ValueError,
                 re.escape(f"rollout_sealed() needs the locator of each result: group {g} rollout 1 "
                           "(attempt 0) has none"))
        j.rollout_failed([RolloutRef(g, 1, 0)], reason="timeout")  # a failure has no result: no locator
        j.rollout_sealed([RolloutRef(g, 0, 0, locator="dp/0"), RolloutRef(g, 1, 1, locator="dp/1")])


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_checkpoint_of_a_negative_step_is_refused(fast_tmp, entry):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        for name in ("begin_checkpoint", "commit_checkpoint"):
            _refused(path, j, entry, lambda o: getattr(o, name)(step=-1), ValueError,
                     re.escape(f"{name}() argument step must be an integer >= 0, got -1"))


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_checkpoint_below_a_committed_step_is_refused(fast_tmp, entry):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        j.begin_checkpoint(step=5)
        j.commit_checkpoint(step=5)
        err = _refused(path, j, entry, lambda o: o.begin_checkpoint(step=4), OwnershipError,
                       r"begin_checkpoint\(step=4\).*below step 5.*committed")
        assert err.lsn == 3
        _refused(path, j, entry, lambda o: o.begin_checkpoint(step=5), OwnershipError,
                 r"begin_checkpoint\(step=5\) is at step 5, which is committed")
        j.begin_checkpoint(step=6)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("second", [8, 9])
def test_a_second_begin_while_one_is_pending_is_refused(fast_tmp, entry, second):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        begun = j.begin_checkpoint(step=8)
        _refused(path, j, entry, lambda o: o.begin_checkpoint(step=second), OwnershipError,
                 re.escape(f"begin_checkpoint(step={second}): the step-8 checkpoint begun at LSN {begun} "
                           "is not committed yet"))
        j.commit_checkpoint(step=8)
        j.begin_checkpoint(step=9)


def test_two_begins_in_one_transaction_are_refused_a_begin_after_a_commit_is_not(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        def both(tx):
            tx.begin_checkpoint(step=1)
            tx.begin_checkpoint(step=2)
        _refused(path, j, "transaction", both, OwnershipError, "step-1 checkpoint .* not committed yet")
        with j.transaction() as tx:
            tx.begin_checkpoint(step=1)
            tx.commit_checkpoint(step=1)
            tx.begin_checkpoint(step=2)
        _refused(path, j, "journal", lambda o: o.begin_checkpoint(step=3), OwnershipError,
                 "step-2 checkpoint")


def test_a_begin_that_a_crash_abandoned_does_not_block_the_next_run(fast_tmp):
    """A checkpoint begun by an earlier process and never committed was abandoned with it."""
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        j.taken([GroupRef(idx=0)])
        j.begin_checkpoint(step=2)   # the process dies while saving the weights
    with Journal.open(path) as j:    # reopened as it is (not restored)
        j.begin_checkpoint(step=3)
        j.commit_checkpoint(step=3)
    state = restore(path, at=4)      # at step 2's begin, never committed: pending there
    assert state.fold_state.pending_checkpoints == {2: 4}
    with Journal.open(path, resume=state) as j:
        j.begin_checkpoint(step=4)


def test_histories_written_before_these_rules_still_fold():
    """Empty events and begins out of order fold as they always did (old journals stay readable)."""
    state = fold([Commit(1, [Trained([], 1)]), Commit(2, [CheckpointBegun(3)]),
                  Commit(3, [CheckpointBegun(2)]), Commit(4, [CheckpointBegun(-1)])])
    assert state.lsn == 4 and state.pending_checkpoints == {3: 2, 2: 3, -1: 4}
