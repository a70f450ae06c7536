"""Mistakes a new user makes, each answered by an error or warning that names what is wrong and
writes nothing: a bad argument, a transaction used after its block, an open without resume=
that would continue a crashed run's history."""

from __future__ import annotations

import re
import warnings

import pytest

from journal import GroupRef, Journal, JournalWarning, RolloutRef, TransactionClosed
from tests.support.journal_model import tree_bytes
from replay import restore

BAD_ARGUMENTS = [
    # (call, exception class, the words the message must hold)
    (lambda j, g: j.taken([GroupRef(idx=-1)]), ValueError, "GroupRef.idx must be an integer >= 0, got -1"),
    (lambda j, g: j.taken([GroupRef(idx="7")]), TypeError, "GroupRef.idx must be an integer >= 0, got '7'"),
    (lambda j, g: j.taken([GroupRef(idx=1, group_id=-5)]), ValueError, "GroupRef.group_id must be an integer >= 0, got -5"),
    (lambda j, g: j.taken([GroupRef(idx=1, group_id="9")]), TypeError, "GroupRef.group_id must be an integer >= 0, got '9'"),
    (lambda j, g: j.taken([GroupRef(idx=1, task_name=5)]), TypeError, "GroupRef.task_name must be a str, got 5"),
    (lambda j, g: j.taken([GroupRef(idx=1, epoch="e")]), TypeError, "GroupRef.epoch must be an integer, got 'e'"),
    (lambda j, g: j.taken([GroupRef(idx=1, epoch=2 ** 63)]), ValueError, "GroupRef.epoch must be an integer of at most 63 bits"),
    (lambda j, g: j.taken([GroupRef(idx=1, fingerprint="abc")]), TypeError, "GroupRef.fingerprint must be bytes, got 'abc'"),
    (lambda j, g: j.admitted([g], target_step=None), TypeError, "admitted() argument target_step must be an integer, got None"),
    (lambda j, g: j.admitted([g], target_step=1, policy_version="v1"), TypeError, "admitted() argument policy_version must be an integer, got 'v1'"),
    (lambda j, g: j.admitted([float(g)], target_step=1), TypeError, "admitted() argument group_ids must be a list of integer group ids"),
    (lambda j, g: j.trained([g], step="3"), TypeError, "trained() argument step must be an integer, got '3'"),
    (lambda j, g: j.trained([g], step=object()), TypeError, "trained() argument step must be an integer"),
    (lambda j, g: j.discarded([g], reason=None), TypeError, "discarded() argument reason must be a str, got None"),
    (lambda j, g: j.begin_checkpoint(step=1.5), TypeError, "begin_checkpoint() argument step must be an integer, got 1.5"),
    (lambda j, g: j.finished([g], locators=[1]), TypeError, "finished() argument locators must be a list of str"),
]


@pytest.mark.parametrize("case", range(len(BAD_ARGUMENTS)))
def test_a_bad_argument_is_named_with_its_value_and_nothing_is_written(fast_tmp, case):
    call, cls, words = BAD_ARGUMENTS[case]
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        before = tree_bytes(path)
        with pytest.raises(cls) as info:
            call(j, g)
        assert words in str(info.value)
        assert "$[" not in str(info.value)  # not msgspec's path into the encoded commit
        assert tree_bytes(path) == before and j.lsn == 1


TX_CALLS = {
    "taken": lambda tx, g: tx.taken([GroupRef(idx=5)]),
    "diverted": lambda tx, g: tx.diverted([g]),
    "admitted": lambda tx, g: tx.admitted([g], target_step=1),
    "finished": lambda tx, g: tx.finished([g]),
    "trained": lambda tx, g: tx.trained([g], step=1),
    "discarded": lambda tx, g: tx.discarded([g], reason="rollout_failed"),
    "begin_checkpoint": lambda tx, g: tx.begin_checkpoint(step=1),
    "commit_checkpoint": lambda tx, g: tx.commit_checkpoint(step=1),
    "record_identity": lambda tx, g: tx.record_identity({"temperature": 0.7}),
}


@pytest.mark.parametrize("ending", ["commit", "rollback", "empty"])
@pytest.mark.parametrize("name", sorted(TX_CALLS))
def test_a_transaction_used_after_its_block_raises_and_writes_nothing(fast_tmp, name, ending):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        try:
            with j.transaction() as tx:
                if ending != "empty":
                    tx.admitted([g], target_step=1)
                if ending == "rollback":
                    raise KeyError("the trainer's own error")
        except KeyError:
            pass
        lsn, before = j.lsn, tree_bytes(path)
        with pytest.raises(TransactionClosed) as info:
            TX_CALLS[name](tx, g)
        msg = str(info.value)
        assert f"{name}()" in msg and path in msg and "ended" in msg
        if ending == "commit":
            assert f"committed at LSN {lsn}" in msg
        assert j.lsn == lsn and tree_bytes(path) == before
        with pytest.raises(TransactionClosed):
            with tx:  # not reusable either
                pass
        assert j.lsn == lsn
        assert j.owner_of(g).name == ("ADMITTED" if ending == "commit" else "RESERVED")
        j.diverted([g]) if ending != "commit" else j.finished([g])  # the journal is still usable


def test_a_transaction_never_entered_records_nothing(fast_tmp):
    with Journal.open(str(fast_tmp / "j")) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        tx = j.transaction()
        with pytest.raises(TransactionClosed, match="outside a `with` block"):
            tx.discarded([g], reason="x")
        with tx:
            tx.discarded([g], reason="x")
        assert j.owner_of(g).name == "DROPPED"


def _history(path, tail):
    """A checkpoint (begun at LSN 3, committed at LSN 4), then `tail` (calls on the journal)."""
    with Journal.open(path) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.admitted([g], target_step=1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        tail(j, g)


def _open_warnings(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Journal.open(path, **kw).close()
    return [w for w in caught if issubclass(w.category, JournalWarning)]


def test_open_without_resume_past_the_checkpoint_warns_with_both_lsns_and_the_fix(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path, lambda j, g: (j.finished([g]), j.begin_checkpoint(step=2)))
    (w,) = _open_warnings(path)
    msg = str(w.message)
    assert "LSN 3" in msg and "LSN 6" in msg and path in msg
    assert "replay.restore(path)" in msg and "resume=state" in msg
    assert w.filename == __file__  # points at the caller's open
    assert _open_warnings(path, resume=restore(path)) == []  # the fix


@pytest.mark.parametrize("tail", [
    lambda j, g: None,                                                    # clean stop after the checkpoint
    lambda j, g: (j.begin_checkpoint(step=2), j.commit_checkpoint(step=2)),  # only markers after it
    lambda j, g: j.begin_checkpoint(step=2),                              # a checkpoint begun, not committed
])
def test_checkpoint_markers_after_the_checkpoint_do_not_warn(fast_tmp, tail):
    path = str(fast_tmp / "j")
    _history(path, tail)
    assert _open_warnings(path) == []


def test_no_checkpoint_at_all_counts_from_lsn_0(fast_tmp):
    path = str(fast_tmp / "j")
    assert _open_warnings(path) == []  # a new journal
    assert _open_warnings(path) == []  # still empty
    with Journal.open(path) as j:
        j.taken([GroupRef(idx=0)])
    (w,) = _open_warnings(path)
    assert "LSN 0" in str(w.message) and "LSN 1" in str(w.message)


@pytest.mark.parametrize("call, message", [
    (lambda j, g: j.admitted([g], target_step=1, rollouts=0), "admitted() argument rollouts must be an integer from 1 to 65535, got 0"),
    (lambda j, g: j.rollout_sealed([RolloutRef(g, -1, 0, "dp/0")]), "RolloutRef.index must be an integer from 0 to 65534, got -1"),
    (lambda j, g: j.rollout_failed([RolloutRef(g, 0, -2)], reason="x"), "RolloutRef.attempt must be an integer >= 0, got -2"),
    (lambda j, g: j.rollout_sealed([RolloutRef(g, 0, 0, locator=7)]), "RolloutRef.locator must be a str, got 7"),
])
def test_bad_rollout_arguments_are_named_in_words(fast_tmp, call, message):
    with Journal.open(str(fast_tmp / "j"), sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)])
        with pytest.raises((ValueError, TypeError), match=re.escape(message)):
            call(j, g)
        assert j.lsn == 1
