"""`AsyncJournal`: the journal's commits awaited by an asyncio trainer."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from .writer import Journal, Transaction


class AsyncJournal:
    """Awaitable commits for an asyncio trainer, with no thread per pending commit.

    A call checks, folds and queues its commit on the event loop's thread (CPU work under the
    journal's lock, which the writer never holds across a write or an fsync), then awaits a
    future. One flusher thread makes queued commits durable with the writer's group commit and
    settles the futures of every commit that became durable, so all the commits awaited while
    an fsync runs share the next one. An illegal call raises at once, as `Journal`'s does;
    `JournalFailed` reaches every commit the failed write took. The flusher exits after a
    second without work and starts again on demand.

    The flusher hands a loop each batch's outcome in one callback, which settles at most
    SETTLE_PER_TURN futures per turn of the loop (the rest in the next turns): each settled
    future resumes a coroutine that may commit again on the loop's thread, so this bounds the
    loop's longest turn, and the first resumed commits reach the flusher sooner."""

    _CALLS = frozenset({"taken", "diverted", "admitted", "finished", "trained", "discarded",
                        "rollout_sealed", "rollout_failed", "begin_checkpoint", "commit_checkpoint"})
    _IDLE_SECONDS = 1.0
    SETTLE_PER_TURN = 32

    def __init__(self, journal: Journal):
        self.journal = journal
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, asyncio.Future, Any]] = []  # (lsn, future, its result)
        self._flusher: threading.Thread | None = None

    def __getattr__(self, name: str):
        if name == "flush":
            async def flush() -> None:
                await asyncio.to_thread(self.journal.flush)
            return flush
        if name not in self._CALLS:
            return getattr(self.journal, name)

        async def call(*args, **kwargs):
            return await self._commit(name, args, kwargs)

        call.__name__ = name
        self.__dict__[name] = call  # built once per name: later lookups find it
        return call

    def _commit(self, name: str, args: tuple, kwargs: dict) -> asyncio.Future:
        """Queue the commit of `name(*args, **kwargs)`; the future its caller awaits."""
        tx = Transaction(self.journal)
        tx.__enter__()
        try:
            result = getattr(tx, name)(*args, **kwargs)
        except BaseException:
            tx._end(commit=False)
            raise
        pending = tx._end(commit=True)
        future = asyncio.get_running_loop().create_future()
        with self._cond:
            self._waiting.append((pending.lsn, future, result if name == "taken" else pending.lsn))
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, name="journal-async-flush",
                                                 daemon=True)
                self._flusher.start()
            self._cond.notify()
        return future

    def _flush_loop(self) -> None:
        j = self.journal
        while True:
            with self._cond:
                if not self._waiting:
                    self._cond.wait(self._IDLE_SECONDS)
                    if not self._waiting:
                        self._flusher = None
                        return
                batch, self._waiting = self._waiting, []
            error = None
            with j._cond:
                try:
                    j._wait(max(lsn for lsn, _, _ in batch))
                except BaseException as exc:  # JournalFailed: for the commits the write took
                    error = exc
                durable = j._durable_lsn
            by_loop: dict[asyncio.AbstractEventLoop, list] = {}
            for lsn, future, result in batch:
                by_loop.setdefault(future.get_loop(), []).append(
                    (future, result, error if lsn > durable else None))
            for loop, outcomes in by_loop.items():
                loop.call_soon_threadsafe(_settle, loop, outcomes, 0, self.SETTLE_PER_TURN)


def _settle(loop: asyncio.AbstractEventLoop, outcomes: list, start: int, per_turn: int) -> None:
    """Settle outcomes[start:start + per_turn] ((future, result, error) each), the rest in the
    loop's next turns."""
    stop = start + per_turn
    for future, result, error in outcomes[start:stop]:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    if stop < len(outcomes):
        loop.call_soon(_settle, loop, outcomes, stop, per_turn)
