"""The attempt fence is checked before a session writes rows: a late `progress` (or seal) of an
attempt that a restore gave up raises the fence's `StaleAttempt`, with nothing written to the
data plane or the journal, also when the new process would number its prefix as a row that a
restore still pins (the dead attempt's own prefix, handed back to continue from)."""

from __future__ import annotations

import asyncio

import pytest

from journal import StaleAttempt
from replay import LocalDataPlane

from tests.replay.test_session import Run


def test_a_late_prefix_of_a_dead_attempt_is_fenced_before_its_row_is_written(fast_tmp):
    """Attempt 0 records turn 1 by the checkpoint's weights, the checkpoint commits, then turn 2
    by newer weights; the process dies. The restart hands the rollout back at attempt 1 from the
    turn-1 prefix (turn 2 was by weights that died). Attempt 0's worker, still running, sends
    turn 3: the fence refuses it, naming the attempts."""
    run = Run(fast_tmp)
    with run.open() as s:
        (gid, _other) = s.take(next(s.batches()))
        s.admit([gid], step=1, rollouts=1)
        s.progress(gid, 0, 0, {"turns": 1}, tokens=10, turn=1, policy_version=0)
        s.checkpoint(0, save=lambda: None)
        s.progress(gid, 0, 0, {"turns": 2}, tokens=20, turn=2, policy_version=1)
    with run.open() as s:
        (w,) = [w for w in s.resume_work if w.group_id == gid]
        (r,) = w.pending
        assert r.attempt == 1 and r.progress is not None and r.progress.turn == 1
        rows, lsn = sorted(s.data_plane.locators()), s.journal.lsn
        with pytest.raises(StaleAttempt, match=rf"group {gid} rollout 0 names attempt 0, but its current "
                                               r"attempt is 1"):
            s.progress(gid, 0, 0, {"turns": 3}, tokens=30, turn=3, policy_version=1)
        assert sorted(s.data_plane.locators()) == rows and s.journal.lsn == lsn
        assert s.data_plane.get(r.progress.locator) == {"turns": 1}   # the prefix handed back, intact
        s.progress(gid, 0, 1, {"turns": 2}, tokens=20, turn=2, policy_version=0)   # the live attempt goes on


class CountingPuts(LocalDataPlane):
    """A data plane that counts the prefixes put into it."""

    puts = 0

    def put_progress(self, *args):
        CountingPuts.puts += 1
        return super().put_progress(*args)


def test_an_async_sessions_late_prefix_is_fenced_before_its_row_is_put(fast_tmp):
    from tests.replay.test_async_session import _open

    async def run():
        async with await _open(fast_tmp, data_plane=CountingPuts(str(fast_tmp / "rows"))) as s:
            (gid, *_rest) = await s.take(next(s.batches()))
            await s.admit([gid], step=1, rollouts=1)
            await s.progress(gid, 0, 0, {"turns": 1}, tokens=10)
            assert await s.fail(gid, 0, 0, reason="worker lost") == 1
            puts = CountingPuts.puts
            with pytest.raises(StaleAttempt, match="names attempt 0, but its current attempt is 1"):
                await s.progress(gid, 0, 0, {"turns": 2}, tokens=20)
            assert CountingPuts.puts == puts   # refused before its row was written
    asyncio.run(run())
