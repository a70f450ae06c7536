"""`replay.AsyncSession`: the session's calls awaited in an event loop, with the same
outcomes as `Session` and no thread per pending commit."""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from journal import JournalWarning, Owner, Reader, StaleAttempt
from journal.events import Finished, RolloutSealed
from replay import AsyncSession, LocalDataPlane

from tests.replay.test_session import DATASET, collate


async def _open(root, **kw) -> AsyncSession:
    loaded = []
    opts = dict(dataset=DATASET, collate_fn=collate, data_plane=LocalDataPlane(str(root / "rows")),
                loader=StatefulDataLoader(DATASET, batch_size=5, collate_fn=collate), load_weights=loaded.append)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        s = await AsyncSession.open(str(root / "journal"), **{**opts, **kw})
    s.loaded = loaded
    return s


def test_an_async_session_runs_the_loop_and_restores_like_a_session(fast_tmp):
    async def first():
        async with await _open(fast_tmp) as s:
            batches = s.batches()
            gids = await s.take(next(batches))
            await s.admit(gids, step=1, rollouts=3)
            # every rollout of the batch at once: their seals share fsyncs
            await asyncio.gather(*(s.seal(g, r.index, r.attempt, {"g": g, "i": r.index})
                                   for g in gids for r in s.pending(g)))
            assert all(s.journal.owner_of(g) == Owner.REPLAY for g in gids)
            assert await s.rows(gids[0]) == [{"g": gids[0], "i": i} for i in range(3)]
            nxt = await s.take(next(batches))
            await s.admit(nxt, step=2, rollouts=3)
            assert await s.fail(nxt[0], 0, 0, reason="timeout") == 1
            with pytest.raises(StaleAttempt):
                await s.seal(nxt[0], 0, 0, {"late": True})
            await s.seal(nxt[0], 1, 0, {"kept": True})
            await s.trained(gids, step=1)
            await s.checkpoint(1, save=lambda: asyncio.sleep(0))   # an awaitable save is awaited
            assert s.stats()["rows_reclaimed"] == 15
            return gids, nxt
    gids, nxt = asyncio.run(first())
    last_commits = [r.commit.events for r in Reader(str(fast_tmp / "journal")).records()]
    assert sum(1 for evs in last_commits if [type(e) for e in evs] == [RolloutSealed, Finished]) == 5

    async def second():
        async with await _open(fast_tmp) as s:
            assert (s.step, s.loaded) == (1, [1])
            work = {w.group_id: w for w in s.resume_work}
            assert [w.kind for w in s.resume_work] == ["generate"] * 5
            assert [(r.index, r.sealed) for r in work[nxt[0]].rollouts] == [(0, False), (1, True), (2, False)]
            assert work[nxt[0]].pending[0].attempt >= 2   # above the given-up attempt 1 and the fence
    asyncio.run(second())


def test_pending_async_commits_hold_no_thread_each(fast_tmp):
    """200 commits awaited at once: the threads alive stay a handful (the flusher and the
    worker threads of the data plane's I/O), not one per pending commit."""
    peak = [0]

    async def main():
        async with await _open(fast_tmp, sync="always") as s:
            gids = await s.take(next(s.batches()))
            await s.admit(gids, step=1, rollouts=40)
            base = threading.active_count()

            async def seal(g, r):
                await s.seal(g, r.index, r.attempt, {"i": r.index})
                peak[0] = max(peak[0], threading.active_count() - base)
            await asyncio.gather(*(seal(g, r) for g in gids for r in s.pending(g)))
            assert all(s.journal.owner_of(g) == Owner.REPLAY for g in gids)
    asyncio.run(main())
    assert peak[0] <= 12, peak
