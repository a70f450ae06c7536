"""`AsyncSession`: `Session` for an asyncio trainer. Commits are awaited over
`journal.AsyncJournal` (every commit awaited while an fsync runs shares the next one, with no
thread per pending commit); the data plane's blocking I/O runs in worker threads."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

from journal import AsyncJournal, RolloutRef

from .core import Begun, Core, Fill
from .fence import refuse_progress
from .row_steps import RowStep, progress_step, seal_step
from .sync import Session


class AsyncSession(Core):
    """`Session`'s calls as coroutines: `s = await AsyncSession.open(...)`, then
    `await s.take(batch)`, `await s.seal(...)`, `await s.checkpoint(step, save=...)` (`save`
    may be a coroutine function), `async with` or `await s.close()`. `resume_work`, `spares`,
    `epoch`, `batches()`, `stats()` and `journal` are as in `Session`."""

    def __init__(self, *args, **kwargs):  # use AsyncSession.open
        raise TypeError("use await AsyncSession.open(journal_dir, ...)")

    @classmethod
    async def open(cls, journal_dir: str, **options) -> "AsyncSession":
        """`Session.open` (same arguments), for a trainer running in an event loop. The open
        itself runs on the loop's thread: it happens once, before the loop has other work."""
        options = {**_OPEN_DEFAULTS, **options}
        self = cls._start(journal_dir, **options)
        self._aj = AsyncJournal(self.journal)
        return self

    async def _io(self, fn: Callable, *args) -> Any:
        return await asyncio.to_thread(fn, *args)

    def _commit(self, fill: Fill):
        return self._aj.commit(fill)

    async def take(self, batch: Any, *, divert: bool = False) -> list[int]:
        return await self._commit(self.take_fill(batch, divert))

    async def admit(self, group_ids: list[int], *, step: int, policy_version: int | None = None,
                    rollouts: int | None = None) -> None:
        await self._aj.admitted(group_ids, target_step=step, policy_version=policy_version,
                                rollouts=rollouts)

    async def seal(self, group_id: int, index: int, attempt: int, rows: Any, *,
                   policy_version: int | None = None) -> str:
        return await self._store_and_commit(seal_step(self, group_id, index, attempt, policy_version), rows)

    async def progress(self, group_id: int, index: int, attempt: int, rows: Any, *, tokens: int,
                       turn: int | None = None, policy_version: int | None = None) -> str:
        refuse_progress(self.journal, group_id, index, attempt, tokens, turn, policy_version)
        return await self._store_and_commit(
            progress_step(self, group_id, index, attempt, tokens, turn, policy_version), rows)

    async def _store_and_commit(self, step: RowStep, rows: Any) -> str:
        if self.row_commits is not None:
            await self.row_commits.submit(step.locator, rows, step.fill(step.locator), lambda _: step.after())
            return step.locator
        locator = await self._io(step.put, rows)
        try:
            await self._commit(step.fill(locator))
        except Exception as exc:
            if self.refused(exc, locator):
                await self._io(self.data_plane.delete, [locator])
            raise
        await self._drop(step.after())
        return locator

    async def _drop(self, rows: list[str]) -> None:
        if rows:
            self._reclaimed += await self._io(self.plane().delete, rows)

    async def finish(self, group_id: int, rows: Any, *, policy_version: int | None = None) -> str:
        self.check_version(group_id, self.journal.group(group_id), policy_version, "the rows")
        locator = await self._io(self.plane().put, group_id, rows)
        await self._aj.finished([group_id], policy_version=policy_version, locators=[locator])
        return locator

    async def fail(self, group_id: int, index: int, attempt: int, *, reason: str) -> int:
        await self._aj.rollout_failed([RolloutRef(group_id, index, attempt)], reason=reason)
        if self.data_plane is not None:
            await self._drop(self.prefix_moved(group_id, index, None))
        return attempt + 1

    async def divert(self, group_ids: list[int]) -> None:
        await self._aj.diverted(group_ids)

    async def discard(self, group_ids: list[int], *, reason: str) -> None:
        self.note_left(await self._commit(self.leaving_fill(
            group_ids, lambda tx: tx.discarded(group_ids, reason=reason))))

    async def replace(self, failed: int, spare: int, *, reason: str, step: int,
                      policy_version: int | None = None, rollouts: int | None = None) -> None:
        def move(tx) -> None:
            tx.discarded([failed], reason=reason)
            tx.admitted([spare], target_step=step, policy_version=policy_version, replaces=failed,
                        rollouts=rollouts)
        self.note_left(await self._commit(self.leaving_fill([failed], move)))

    async def rows(self, group_id: int) -> list[Any]:
        dp = self.plane()
        locators = self.locators_of(group_id)
        return await self._io(lambda: [dp.get(loc) for loc in locators])

    async def trained(self, group_ids: list[int], *, step: int) -> None:
        self.check_trained(step)
        self.note_left(await self._commit(self.leaving_fill(
            group_ids, lambda tx: tx.trained(group_ids, step=step))))
        self.note_trained()

    async def checkpoint(self, step: int, *, save: Callable[[], Any]) -> int:
        again = self.committed_again(step)
        if again is not None:
            return again
        begun = self.retry_of(step)
        if begun is None:
            rows, held = self.take_reclaimable()
            try:
                begun = Begun(step, await self._aj.begin_checkpoint(step=step), rows, prefixes=held)
            except BaseException:
                self.give_back(rows)
                raise
        try:
            saved = save()
            if inspect.isawaitable(saved):
                await saved
        except BaseException:
            self.save_failed(begun)
            raise
        await self._aj.commit_checkpoint(step=step)
        if self.journal.sync != "always":
            await self._aj.flush()
        self.pin(begun)
        if begun.rows:
            self._reclaimed += await self._io(self.plane().delete, begun.rows)
        self.after_checkpoint(step, begun.lsn)
        return begun.lsn

    async def close(self) -> None:
        try:
            await self._io(self.before_close)
        finally:
            self.journal.close()

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


_OPEN_DEFAULTS = {name: p.default for name, p in inspect.signature(Session.open).parameters.items()
                  if p.kind is p.KEYWORD_ONLY}

for _name in ("take", "admit", "progress", "seal", "finish", "fail", "divert", "discard", "replace", "rows",
              "trained", "checkpoint", "close"):
    getattr(AsyncSession, _name).__doc__ = f"Awaitable `Session.{_name}`: {getattr(Session, _name).__doc__}"
