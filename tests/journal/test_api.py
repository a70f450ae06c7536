"""The Journal API edges: an illegal or ill-typed call raises and writes nothing (so the
journal never holds a record its own reader rejects), closed journals, empty transactions,
sync modes."""

from __future__ import annotations

import random

import pytest

from journal import GroupRef, Journal, JournalClosed, JournalError, OwnershipError, Reader
from tests.support.journal_model import Model, assert_journal_matches, assert_state_matches, drive, tree_bytes


@pytest.fixture
def opened(fast_tmp):
    path = str(fast_tmp / "j")
    j = Journal.open(path)
    m = drive(j, Model(), random.Random(13), 15)
    gids = j.taken([GroupRef(idx=1), GroupRef(idx=2)])
    m = m.commit([("taken", gids, None)])
    j.admitted([gids[1]], target_step=1)
    m = m.commit([("admitted", [gids[1]], None)])
    yield path, j, m, gids
    j.close()


def bad_calls(gids):
    r, a = gids  # r is RESERVED, a is ADMITTED
    return {
        "float gid equal to a live one": lambda j: j.admitted([float(r)], target_step=1),
        "bool gid": lambda j: j.discarded([True], reason="x"),
        "str step": lambda j: j.trained([a], step="3"),
        "None target_step": lambda j: j.admitted([r], target_step=None),
        "float target_step": lambda j: j.admitted([r], target_step=1.5),
        "None reason": lambda j: j.discarded([r], reason=None),
        "int locator": lambda j: j.finished([a], locators=[1]),
        "str idx": lambda j: j.taken([GroupRef(idx="7")]),
        "int task_name": lambda j: j.taken([GroupRef(idx=7, task_name=5)]),
        "str fingerprint": lambda j: j.taken([GroupRef(idx=7, fingerprint="abc")]),
        "str checkpoint step": lambda j: j.begin_checkpoint(step="8"),
        "bool in a transaction": lambda j: _tx(j, lambda tx: (tx.diverted([r]), tx.admitted([r], target_step=True))),
        "set loader_state": lambda j: j.taken([GroupRef(idx=7)], loader_state={"s": {1, 2}}),
        "object loader_state": lambda j: j.taken([GroupRef(idx=7)], loader_state={"o": object()}),
        "tuple key loader_state": lambda j: j.taken([GroupRef(idx=7)], loader_state={(1, 2): 1}),
        "huge int loader_state": lambda j: j.taken([GroupRef(idx=7)], loader_state={"n": 2 ** 70}),
    }


def _tx(j, body):
    with j.transaction() as tx:
        body(tx)


@pytest.mark.parametrize("name", sorted(bad_calls((0, 1))))
def test_ill_typed_call_raises_and_writes_nothing(opened, name):
    path, j, m, gids = opened
    before = tree_bytes(path)
    with pytest.raises((TypeError, ValueError, OverflowError, JournalError)):
        bad_calls(gids)[name](j)
    assert tree_bytes(path) == before
    assert_journal_matches(j, m)
    # still usable, and everything on disk reads back
    lsn = j.diverted([gids[0]])
    m = m.commit([("diverted", [gids[0]])])
    assert lsn == m.lsn
    j.close()
    with Journal.open(path) as j2:
        assert_journal_matches(j2, m)
    assert_state_matches(Reader(path).fold(), m)


def test_illegal_transitions_raise_ownership_error_naming_group_and_owner(opened):
    path, j, m, gids = opened
    r, a = gids
    before = tree_bytes(path)
    with pytest.raises(OwnershipError) as info:
        j.trained([r], step=1)
    assert info.value.group_id == r and info.value.lsn == m.lsn + 1
    assert str(r) in str(info.value) and "RESERVED" in str(info.value) and "trained" in str(info.value)
    with pytest.raises(OwnershipError):
        j.finished([a, a])  # one event names a group at most once
    with pytest.raises(OwnershipError):
        j.taken([GroupRef(idx=1, group_id=r)])  # an id is taken once in the whole history
    with pytest.raises(OwnershipError):
        j.commit_checkpoint(step=12345)
    with pytest.raises(OwnershipError):
        j.admitted([r], target_step=1, replaces=10 ** 6)
    assert tree_bytes(path) == before
    assert_journal_matches(j, m)


def test_empty_transaction_commits_nothing_and_closed_journal_refuses(opened):
    path, j, m, gids = opened
    before = tree_bytes(path)
    with j.transaction():
        pass
    assert tree_bytes(path) == before and j.lsn == m.lsn
    j.close()
    assert j.lsn == m.lsn  # still readable after a clean close
    for call in (lambda: j.owner_of(0), lambda: j.taken([GroupRef(idx=1)]), j.flush,
                 lambda: j.transaction().__enter__()):
        with pytest.raises(JournalClosed):
            call()
    j.close()  # idempotent


@pytest.mark.parametrize("sync", ["always", "batch", "none"])
def test_sync_modes_persist_after_close(fast_tmp, sync):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync=sync, sync_interval=0.01, segment_bytes=4096) as j:
        m = drive(j, Model(), random.Random(14), 60, loader_every=2)
        j.flush()
        assert_journal_matches(j, m)
    assert_state_matches(Reader(path).fold(), m)
    with Journal.open(path) as j:
        assert_journal_matches(j, m)
