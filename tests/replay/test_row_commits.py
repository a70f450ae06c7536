"""A seal (or a prefix) with its rows in one durable step (`replay/session/row_commits.py`), with
the session's journal and `LocalDataPlane` on one `FaultFS`: the seals in flight share one
fdatasync of their rows and one fsync of their commits, and none returns before both hold its
own; the rows of the next batch are written while a batch's commits are fsynced; a refused
commit fails its call alone (its rows deleted), a failed write of rows fails its batch with
nothing journaled, a failed journal fsync fails the calls it held and leaves their rows to the
next open's sweep; coroutines of an `AsyncSession` share the syncs the same way."""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest

from journal import JournalFailed, Reader, StaleAttempt
from replay import AsyncSession, DataPlaneIOError, LocalDataPlane, Session
from tests.support.equality import deep_equal
from tests.support.faultfs import FaultFS
from tests.support.data_plane_runs import at_once
from tests.support.row_commit_runs import (Acks, MeasuredFaultFS, check, hold_first_rows, journal_through,
                                           named_on_disk, open_session, rows_of)


def _admitted(s: Session, groups: int, rollouts: int = 4) -> list[int]:
    gids = s.take({"idx": list(range(len(s.journal.groups()), len(s.journal.groups()) + groups))})
    s.admit(gids, step=1, policy_version=0, rollouts=rollouts)
    return gids


def _syncs(fs: FaultFS, where: str, since: int) -> list:
    return [o for o in fs.ops[since:] if o.kind == "fsync" and os.sep + where + os.sep in o.path]


def test_seals_in_flight_share_one_fdatasync_and_one_fsync_and_return_once_both_hold(fast_tmp):
    fs = MeasuredFaultFS(root=str(fast_tmp))
    s = open_session(str(fast_tmp), fs)
    acks = Acks(fs)
    gids = _admitted(s, 4)
    hold_first_rows(s, fs, 15)
    start = len(fs.ops)
    at_once([lambda g=g, i=i: acks.note(s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows"))) for g in gids for i in range(4)])
    assert len(_syncs(fs, "rows", start)) == 2          # the first seal's rows, then the other 15
    assert len(_syncs(fs, "journal", start)) <= 2       # the same two batches of commits
    s.close()
    for k, (at, loc) in enumerate(acks.calls):          # durable when its call returned
        image = fs.crash_image(str(fast_tmp / f"at{k}"), upto=at)
        assert loc in named_on_disk(os.path.join(image, "journal"))
        assert deep_equal(LocalDataPlane(os.path.join(image, "rows")).get(loc), rows_of(loc))


def test_the_next_batchs_rows_are_written_while_a_batchs_commits_are_fsynced(fast_tmp):
    fs = MeasuredFaultFS(root=str(fast_tmp))
    s = open_session(str(fast_tmp), fs)
    (g,) = _admitted(s, 1)
    held, gate = fs.hold_segment_fsyncs()
    returned = []
    first = threading.Thread(target=lambda: returned.append(s.seal(g, 0, 0, rows_of("a"))))
    first.start()
    assert held.wait(10)                                # the first seal's commit is being fsynced
    start = len(fs.ops)
    second = threading.Thread(target=lambda: returned.append(s.seal(g, 1, 0, rows_of("b"))))
    second.start()
    deadline = threading.Event()
    while not _syncs(fs, "rows", start) and not deadline.wait(0.01):
        pass
    assert len(_syncs(fs, "rows", start)) == 1 and returned == []   # its rows durable meanwhile
    gate.set()
    first.join()
    second.join()
    assert sorted(returned) == [f"g{g}-r0-a0.rows", f"g{g}-r1-a0.rows"]
    assert s.journal.group(g).rollouts.sealed == 0b11
    s.close()


def test_a_refused_commit_fails_its_call_alone_and_its_rows_are_deleted(fast_tmp):
    fs = MeasuredFaultFS(root=str(fast_tmp))
    s = open_session(str(fast_tmp), fs)
    gids = _admitted(s, 2)
    assert s.fail(gids[0], 3, 0, reason="timeout") == 1
    hold_first_rows(s, fs, 7)
    outcomes: dict[tuple[int, int], object] = {}

    def seal(g, i):
        try:
            outcomes[g, i] = s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows"))
        except StaleAttempt as exc:
            outcomes[g, i] = exc

    at_once([lambda g=g, i=i: seal(g, i) for g in gids for i in range(4)])
    assert isinstance(outcomes.pop((gids[0], 3)), StaleAttempt)
    assert all(isinstance(v, str) for v in outcomes.values()) and len(outcomes) == 7
    assert f"g{gids[0]}-r3-a0.rows" not in set(s.data_plane.locators())
    assert set(outcomes.values()) <= set(s.data_plane.locators())
    assert s.stats()["rows_reclaimed"] == 0             # rows of a refused commit are not reclaimed ones
    s.close()


def test_a_failed_write_of_rows_fails_its_batch_and_journals_nothing(fast_tmp):
    fs = MeasuredFaultFS(root=str(fast_tmp))
    s = open_session(str(fast_tmp), fs)
    (g,) = _admitted(s, 1)
    s.seal(g, 0, 0, rows_of("warm"))                    # the pack exists
    lsn = s.journal.lsn
    fs.inject("fsync", path_contains=os.sep + "rows" + os.sep, error=errno.EIO)
    hold_first_rows(s, fs, 2)
    errors = []

    def seal(i):
        try:
            s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows"))
        except DataPlaneIOError as exc:
            errors.append(exc)

    at_once([lambda i=i: seal(i) for i in (1, 2, 3)])
    assert errors and s.journal.lsn == lsn + 3 - len(errors)    # nothing journaled for a failed call
    assert all(e.errno == errno.EIO and s.data_plane.root in str(e) for e in errors)
    for i in range(1, 4):                                # the session goes on
        if not s.journal.group(g).rollouts.is_sealed(i):
            s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows"))
    assert s.journal.owner_of(g).name == "REPLAY"
    s.close()


def test_a_failed_journal_fsync_fails_its_calls_and_the_next_open_sweeps_their_rows(fast_tmp):
    fs = MeasuredFaultFS(root=str(fast_tmp))
    s = open_session(str(fast_tmp), fs)
    (g,) = _admitted(s, 1)
    s.seal(g, 0, 0, rows_of(f"g{g}-r0-a0.rows"))
    fs.inject("fsync", path_contains=os.sep + "journal" + os.sep, error=errno.EIO)
    with pytest.raises(JournalFailed):
        s.seal(g, 1, 0, rows_of(f"g{g}-r1-a0.rows"))
    assert f"g{g}-r1-a0.rows" in set(LocalDataPlane(s.data_plane.root).locators())   # stored, never named
    with pytest.raises(JournalFailed):
        s.close()
    fs.clear_faults()
    check(str(fast_tmp), [(len(fs.ops), f"g{g}-r0-a0.rows")])
    assert f"g{g}-r1-a0.rows" not in set(LocalDataPlane(s.data_plane.root).locators())


def test_coroutines_of_an_async_session_share_the_syncs(fast_tmp):
    fs = MeasuredFaultFS(root=str(fast_tmp))

    async def run() -> list[str]:
        with journal_through(fs):
            s = await AsyncSession.open(str(fast_tmp / "journal"), compact_every=None,
                                        data_plane=LocalDataPlane(str(fast_tmp / "rows"), fs=fs))
        gids = await s.take({"idx": list(range(8))})
        await s.admit(gids, step=1, rollouts=4)
        start = len(fs.ops)
        got = await asyncio.gather(*(s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows")) for g in gids for i in range(4)))
        assert len(_syncs(fs, "rows", start)) < 16 and len(_syncs(fs, "journal", start)) < 16
        assert all(s.journal.owner_of(g).name == "REPLAY" for g in gids)
        await s.close()
        return got

    got = asyncio.run(run())
    dp = LocalDataPlane(str(fast_tmp / "rows"))
    assert len(got) == 32 and all(deep_equal(dp.get(loc), rows_of(loc)) for loc in got)
    assert set(got) <= named_on_disk(str(fast_tmp / "journal"))
    assert Reader(str(fast_tmp / "journal")).fold().lsn > 0
