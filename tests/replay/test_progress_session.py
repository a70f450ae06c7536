"""`Session.progress` / `AsyncSession.progress`: the prefix's rows are durable in the data plane
before `rollout_progress` names them; a superseded or ended prefix's row is deleted once the
newer commit is durable, unless the last committed checkpoint holds it (then once the next
checkpoint commits); a refused prefix's row is deleted; after a crash `resume_work` hands the
rollout back with its prefix and the raised attempt, and the prefix's row survives the open."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from journal import JournalWarning, Progress, RolloutEnded, StaleAttempt
from replay import AsyncSession, LocalDataPlane, Session


def _open(root, cls=Session):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)  # a first start warns
        return cls.open(str(root / "journal"), data_plane=LocalDataPlane(str(root / "rows")))


def _admitted(s: Session, n: int = 2) -> int:
    (g,) = s.take({"idx": [len(s.journal.groups())]})
    s.admit([g], step=1, policy_version=0, rollouts=n)
    return g


def _rows(s: Session) -> set[str]:
    return set(s.data_plane.locators())


def test_a_prefix_is_stored_then_journaled_and_a_newer_one_replaces_its_row(fast_tmp):
    with _open(fast_tmp) as s:
        g = _admitted(s)
        first = s.progress(g, 0, 0, {"tokens": [1, 2]}, tokens=2, policy_version=0)
        assert s.data_plane.get(first) == {"tokens": [1, 2]}
        assert s.journal.group(g).rollouts.progress_of(0) == Progress(first, 2, None, 0)
        second = s.progress(g, 0, 0, {"tokens": [1, 2, 3]}, tokens=3, turn=1, policy_version=0)
        assert second != first and _rows(s) == {second}  # the superseded row is gone at once
        assert s.stats()["rows_reclaimed"] == 1
        assert s.pending(g)[0].progress == Progress(second, 3, 1, 0)


@pytest.mark.parametrize("end", ["seal", "fail"])
def test_a_seal_or_failure_ends_the_prefix_and_reclaims_its_row(fast_tmp, end):
    with _open(fast_tmp) as s:
        g = _admitted(s)
        prefix = s.progress(g, 1, 0, {"tokens": [7]}, tokens=1)
        if end == "seal":
            sealed = s.seal(g, 1, 0, {"tokens": [7, 8]})
            assert _rows(s) == {sealed}
        else:
            assert s.fail(g, 1, 0, reason="timeout") == 1
            assert _rows(s) == set()
        assert prefix not in _rows(s) and s.journal.group(g).rollouts.progress is None


def test_a_prefix_the_last_checkpoint_holds_waits_for_the_next_checkpoint(fast_tmp):
    with _open(fast_tmp) as s:
        g = _admitted(s)
        held = s.progress(g, 0, 0, {"tokens": [1]}, tokens=1)
        s.checkpoint(1, save=lambda: None)
        newer = s.progress(g, 0, 0, {"tokens": [1, 2]}, tokens=2)
        assert _rows(s) == {held, newer}, "a restore of checkpoint 1 hands back the held prefix"
        s.checkpoint(2, save=lambda: None)
        assert _rows(s) == {newer}


def test_a_refused_prefix_leaves_no_row(fast_tmp):
    with _open(fast_tmp) as s:
        g = _admitted(s)
        s.fail(g, 0, 0, reason="timeout")
        with pytest.raises(StaleAttempt, match=f"group {g} rollout 0 names attempt 0"):
            s.progress(g, 0, 0, {"tokens": [1]}, tokens=1)
        sealed = s.seal(g, 1, 0, {"tokens": [2]})
        with pytest.raises(RolloutEnded, match=f"group {g} rollout 1 attempt 0"):
            s.progress(g, 1, 0, {"tokens": [2]}, tokens=1)
        assert _rows(s) == {sealed}


def test_after_a_crash_resume_work_continues_from_the_prefix(fast_tmp):
    s = _open(fast_tmp)
    g = _admitted(s)
    s.progress(g, 0, 0, {"tokens": [1, 2]}, tokens=2, policy_version=0)
    s.checkpoint(1, save=lambda: None)
    later = s.progress(g, 0, 0, {"tokens": [1, 2, 3]}, tokens=3, policy_version=1)
    stale = s.data_plane.put_progress(g, 1, 0, 9, {"never": "journaled"})  # a crash cut its commit off
    s.journal.close()  # the process dies: no checkpoint after `later`
    s = _open(fast_tmp)
    try:
        (w,) = s.resume_work
        r0, r1 = w.rollouts
        # the prefix continued the version-0 one: its tokens span versions 0 and 1
        assert (w.kind, r0.attempt, r0.progress) == ("generate", 1, Progress(later, 3, None, 1, 0))
        assert r1.progress is None and s.restored.salvaged_progress == [(g, 0)]
        restored = s.stats()["restored"]
        assert (restored["prefixes_continued"], restored["prefix_tokens_continued"]) == (1, 3)
        assert s.data_plane.get(r0.progress.locator) == {"tokens": [1, 2, 3]}
        assert stale not in _rows(s) and later in _rows(s)
        cont = s.progress(g, 0, r0.attempt, {"tokens": [1, 2, 3, 4]}, tokens=4, policy_version=1)
        assert later in _rows(s), "the restore point's tail hands `later` back until a checkpoint"
        s.checkpoint(2, save=lambda: None)
        assert later not in _rows(s) and cont in _rows(s)
    finally:
        s.close()


def test_an_async_session_records_prefixes_the_same_way(fast_tmp):
    async def go():
        s = await _open(fast_tmp, AsyncSession)
        try:
            g = (await s.take({"idx": [0]}))[0]
            await s.admit([g], step=1, rollouts=1)
            first = await s.progress(g, 0, 0, {"tokens": [1]}, tokens=1)
            second = await s.progress(g, 0, 0, {"tokens": [1, 2]}, tokens=2)
            assert _rows(s) == {second} and first != second
            assert s.journal.group(g).rollouts.progress_of(0) == Progress(second, 2)
            with pytest.raises(StaleAttempt):
                await s.progress(g, 0, 3, {"tokens": []}, tokens=0)
            sealed = await s.seal(g, 0, 0, {"tokens": [1, 2, 3]})
            assert _rows(s) == {sealed}
        finally:
            await s.close()
    asyncio.run(go())
