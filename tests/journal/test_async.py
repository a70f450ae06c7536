"""AsyncJournal: many coroutines share fsyncs with no thread per pending commit; failures and
cancellations reach exactly the commits they concern."""

from __future__ import annotations

import asyncio
import errno
import gc
import threading
import weakref

import pytest

from tests.support.faultfs import FaultFS
from journal import AsyncJournal, GroupRef, Journal, JournalFailed, Owner, OwnershipError, Reader


def _journal_with_groups(fast_tmp, n: int):
    """(path, its FaultFS, the open journal, `n` taken groups, an AsyncJournal on it)."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs)
    return path, fs, j, j.taken([GroupRef(idx=i) for i in range(n)]), AsyncJournal(j)


def test_256_coroutines_share_fsyncs_without_a_thread_each(fast_tmp):
    path, fs, j, gids, aj = _journal_with_groups(fast_tmp, 256)
    fsyncs, threads = [], []
    fs.on("fsync", lambda kind, p: fsyncs.append(p) if p.endswith(".wal") else None)

    async def one(g):
        threads.append(threading.active_count())
        return await aj.admitted([g], target_step=1)

    async def main():
        return await asyncio.gather(*[one(g) for g in gids])

    before = threading.active_count()
    lsns = asyncio.run(main())
    assert sorted(lsns) == list(range(2, 258))
    assert max(threads) <= before + 1  # the flusher, not a thread per pending commit
    assert len(fsyncs) <= 256 // 8, f"{len(fsyncs)} fsyncs for 256 commits: little sharing"
    assert all(j.owner_of(g) == Owner.ADMITTED for g in gids)
    j.close()
    assert Reader(path).fold().lsn == 257


def test_an_illegal_call_raises_at_once_and_writes_nothing(fast_tmp):
    j = Journal.open(str(fast_tmp / "j"), sync="none")
    aj = AsyncJournal(j)

    async def main():
        (g,) = await aj.taken([GroupRef(idx=1)])
        with pytest.raises(OwnershipError, match="requires owner REPLAY"):
            await aj.trained([g], step=1)
        return g

    g = asyncio.run(main())
    assert j.lsn == 1 and j.owner_of(g) == Owner.RESERVED
    j.close()


def test_a_failed_fsync_fails_the_commits_it_took_and_then_every_call(fast_tmp):
    path, fs, j, gids, aj = _journal_with_groups(fast_tmp, 8)
    fs.inject("fsync", nth=1, error=errno.EIO, path_contains=".wal")

    async def main():
        return await asyncio.gather(*[aj.admitted([g], target_step=1) for g in gids],
                                    return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, JournalFailed) for r in results)
    with pytest.raises(JournalFailed):
        asyncio.run(aj.diverted([gids[0]]))
    assert Reader(path).fold().lsn in range(1, 10)  # unknown after a failed fsync, never past


def test_a_cancelled_await_does_not_lose_its_commit(fast_tmp):
    path = str(fast_tmp / "j")
    j = Journal.open(path)
    aj = AsyncJournal(j)

    async def main():
        task = asyncio.ensure_future(aj.taken([GroupRef(idx=5)]))
        await asyncio.sleep(0)  # queued: folded and on its way to the disk
        task.cancel()
        other = await aj.taken([GroupRef(idx=6)])
        return other

    (g6,) = asyncio.run(main())
    assert j.owner_of(g6) == Owner.RESERVED and j.owner_of(g6 - 1) == Owner.RESERVED
    j.close()
    assert Reader(path).fold().lsn == 2


def test_a_batch_resumes_its_coroutines_a_bounded_number_per_loop_turn(fast_tmp):
    """The flusher hands the loop a batch's outcomes in one callback, which settles at most
    SETTLE_PER_TURN futures per turn: 256 commits made durable together do not resume 256
    coroutines (each may commit again) in one turn of the loop."""
    path, fs, j, gids, aj = _journal_with_groups(fast_tmp, 257)
    first, batch = gids[0], gids[1:]
    held, gate = fs.hold_segment_fsyncs()
    turn, resumed_in = [0], []
    wakeups = []

    async def one(g):
        await aj.admitted([g], target_step=1)
        resumed_in.append(turn[0])

    async def main():
        loop = asyncio.get_running_loop()
        wake = loop.call_soon_threadsafe

        def counting(*args):
            wakeups.append(threading.current_thread().name)
            return wake(*args)

        loop.call_soon_threadsafe = counting

        def tick():
            turn[0] += 1
            if len(resumed_in) < len(batch):
                loop.call_soon(tick)

        ahead = asyncio.ensure_future(aj.admitted([first], target_step=1))
        while not held.is_set():  # the flusher is in the fsync of `first`
            await asyncio.sleep(0.001)
        tasks = [asyncio.ensure_future(one(g)) for g in batch]
        await asyncio.sleep(0)  # all 256 queued meanwhile: the flusher's next batch
        loop.call_soon(tick)
        gate.set()
        await asyncio.gather(ahead, *tasks)

    asyncio.run(main())
    per_turn = {t: resumed_in.count(t) for t in set(resumed_in)}
    assert max(per_turn.values()) <= AsyncJournal.SETTLE_PER_TURN, per_turn
    flusher_wakeups = [name for name in wakeups if name == "journal-async-flush"]
    assert len(flusher_wakeups) <= fs.count("fsync", path_contains=".wal"), \
        f"{len(flusher_wakeups)} wake-ups of the loop for 257 commits: not one per batch"
    j.close()
    assert Reader(path).fold().lsn == 258


def test_a_queued_commit_keeps_no_tuple_of_its_own_alive(fast_tmp):
    """While its commit waits for the fsync, an awaited call keeps no tuple alive: none holding
    its future, none holding its arguments. (Every object a queued commit keeps lives through
    the garbage collections meanwhile, and the ones that reach the old generation bring the
    full collections that stall the loop.)"""
    path, fs, j, gids, aj = _journal_with_groups(fast_tmp, 65)
    held, gate = fs.hold_segment_fsyncs()
    arguments = [[g] for g in gids]

    async def one(gs):
        return await aj.admitted(gs, target_step=1)

    async def main():
        ahead = asyncio.ensure_future(one(arguments[0]))
        while not held.is_set():  # the flusher is in the fsync of `ahead`
            await asyncio.sleep(0.001)
        tasks = [asyncio.ensure_future(one(gs)) for gs in arguments[1:]]
        await asyncio.sleep(0)  # each task runs up to its await: 64 commits queued
        assert len(j._pending) == 64
        futures = [t._fut_waiter for t in tasks]
        holders = [r for held_object in futures + arguments[1:]
                   for r in gc.get_referrers(held_object) if type(r) is tuple]
        gate.set()
        await asyncio.gather(ahead, *tasks)
        return len(holders)

    holders = asyncio.run(main())
    assert holders == 0, f"{holders} tuples hold the futures or the arguments of 64 queued commits"
    j.close()
    assert Reader(path).fold().lsn == 66  # the taken, then 65 admitted


def _at_the_last_resume_of_a_batchs_first_turn(fast_tmp, make_probe):
    """Queue 2 * SETTLE_PER_TURN commits as one batch (behind a held fsync); once they are
    queued, `make_probe(path, tasks)` gives a probe; return what it says when the last
    coroutine the batch's first turn resumed runs."""
    per_turn = AsyncJournal.SETTLE_PER_TURN
    path, fs, j, gids, aj = _journal_with_groups(fast_tmp, 2 * per_turn + 1)
    held, gate = fs.hold_segment_fsyncs()
    tasks, probe, seen = [], [], []

    async def one(k, g):
        await aj.admitted([g], target_step=1)
        if k == per_turn - 1:
            seen.append(probe[0]())

    async def main():
        ahead = asyncio.ensure_future(aj.admitted([gids[0]], target_step=1))
        while not held.is_set():  # the flusher is in the fsync of `ahead`
            await asyncio.sleep(0.001)
        tasks.extend(asyncio.ensure_future(one(k, g)) for k, g in enumerate(gids[1:]))
        await asyncio.sleep(0)  # all queued: the flusher's next batch
        probe.append(make_probe(path, tasks))
        gate.set()
        await asyncio.gather(ahead, *tasks)

    asyncio.run(main())
    j.close()
    return seen


def test_a_settled_future_is_not_kept_until_its_whole_batch_is_settled(fast_tmp):
    """A batch settles SETTLE_PER_TURN futures per turn of the loop; the futures settled in a
    turn are freed once their coroutines resumed, not kept by the batch until its last turn."""
    def settled_futures_alive(path, tasks):
        settled = [weakref.ref(t._fut_waiter) for t in tasks[:AsyncJournal.SETTLE_PER_TURN - 1]]
        return lambda: sum(f() is not None for f in settled)

    alive = _at_the_last_resume_of_a_batchs_first_turn(fast_tmp, settled_futures_alive)
    assert alive == [0], f"{alive} of {AsyncJournal.SETTLE_PER_TURN - 1} settled futures still alive"


def test_a_batch_lets_go_of_its_commits_in_the_turns_that_settle_them(fast_tmp):
    """A batch's queued commits (the writer's `Pending`s, with their undo records) are freed
    turn by turn as their futures are settled, among the allocations of the commits their
    coroutines make next, not all at once when the batch is durable: the garbage collector
    counts allocations minus frees, and frees made before the next allocations offset none,
    so freeing a batch at once ran a young collection per batch and, through the objects it
    promoted, full collections that stall the loop."""
    def queued_commits_alive(path, tasks):  # of this journal (earlier tests' may be alive too)
        return lambda: sum(1 for o in gc.get_objects()
                           if type(o).__name__ == "Pending" and o.segment.path.startswith(path))

    alive = _at_the_last_resume_of_a_batchs_first_turn(fast_tmp, queued_commits_alive)
    per_turn = AsyncJournal.SETTLE_PER_TURN
    assert alive == [per_turn], f"{alive} queued commits alive, not the {per_turn} still unsettled"
