"""`AsyncJournal`: the journal's commits awaited by an asyncio trainer."""

from __future__ import annotations

import asyncio
import bisect
import functools
import threading
from _thread import allocate_lock
from typing import Any, Callable, TypeVar

from .kinds import KINDS, Kind
from .writer import Journal, Transaction

T = TypeVar("T")


class AsyncJournal:
    """Awaitable commits for an asyncio trainer, with no thread per pending commit.

    Every transition method of `Journal` (`taken`, `admitted`, `rollout_sealed`, ...) is a
    coroutine here with the same arguments and result; `commit(fill)` makes several
    transitions one atomic commit (`await aj.commit(lambda tx: (tx.discarded(...),
    tx.admitted(...)))`). Other attributes (`lsn`, `owner_of`, `counts`, ...) are the
    journal's (`aj.journal`).

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

    _IDLE_SECONDS = 1.0
    SETTLE_PER_TURN = 32

    def __init__(self, journal: Journal):
        self.journal = journal
        self._mu = allocate_lock()   # guards what follows; held only for appends and swaps
        # the queued commits, in LSN order, as parallel lists (no container per commit: a
        # pending commit's objects live through garbage collections, and fewer of them
        # promote fewer to the old generations, whose full collections stall the loop)
        self._pendings: list = []  # the writer's queued commits (`Journal.submit`)
        self._futures: list[asyncio.Future] = []
        self._results: list[Any] = []
        self._flusher: threading.Thread | None = None
        # the flusher waits for work on `_wakeup` (held) once it set `_idle`; a commit queued
        # then releases it (a plain lock: the loop's thread runs no Condition code per commit)
        self._wakeup = allocate_lock()
        self._wakeup.acquire()
        self._idle = False

    def __getattr__(self, name: str):
        return getattr(self.journal, name)

    async def flush(self) -> None:
        """`Journal.flush` in a worker thread: every commit so far made durable."""
        await asyncio.to_thread(self.journal.flush)

    async def commit(self, fill: Callable[[Transaction], T]) -> T:
        """One atomic commit of the transitions `fill(tx)` records on a `Transaction` (a plain
        function, run on the loop's thread; it must not await); awaits its durability and
        returns what `fill` returned. An illegal transition raises and nothing is written."""
        return await self._queue(fill, False)

    def _queue(self, fill: Callable[[Transaction], Any], lsn_result: bool) -> asyncio.Future:
        """Queue the commit `fill` records; the future its caller awaits, which gets `fill`'s
        result, or the commit's LSN when `lsn_result`."""
        pending, result = self.journal.submit(fill)
        return self._await(pending, pending.lsn if lsn_result and pending is not None else result)

    def _await(self, pending, result: Any) -> asyncio.Future:
        """The future of the queued commit `pending` (None: nothing to wait for), to get `result`."""
        future = asyncio.get_running_loop().create_future()
        if pending is None:  # nothing recorded: nothing to wait for
            future.set_result(result)
            return future
        with self._mu:
            self._pendings.append(pending)
            self._futures.append(future)
            self._results.append(result)
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, name="journal-async-flush",
                                                 daemon=True)
                self._flusher.start()
            elif self._idle:
                self._idle = False
                self._wakeup.release()
        return future

    def _flush_loop(self) -> None:
        j = self.journal
        while True:
            with self._mu:
                pendings, futures, results = self._pendings, self._futures, self._results
                self._pendings, self._futures, self._results = [], [], []
                self._idle = not pendings
            if not pendings:
                if not self._wakeup.acquire(timeout=self._IDLE_SECONDS):
                    with self._mu:
                        if self._idle:   # no commit came: exit (the next one starts a flusher)
                            self._idle, self._flusher = False, None
                            return
                    self._wakeup.acquire()   # the commit that cleared `_idle` released it
                continue
            error = None
            try:
                durable = j.wait_durable(pendings[-1].lsn)
            except BaseException as exc:  # JournalFailed: for the commits the write took
                error, durable = exc, j.durable_lsn
            outcome = _Outcome(pendings, futures, results,
                               bisect.bisect_right(pendings, durable, key=_lsn_of), error)
            for loop in {f.get_loop() for f in futures}:
                loop.call_soon_threadsafe(_settle, loop, outcome, 0, self.SETTLE_PER_TURN)


def _awaitable(kind: Kind):
    """`AsyncJournal.<call>`: `Journal.<call>`'s transition, awaited (same arguments, result)."""
    name = kind.call
    lsn_result = kind.returns is None  # the commit's LSN, as `Journal.<call>` returns it

    async def call(self: AsyncJournal, *args, **kwargs):
        pending, result = self.journal.submit_event(name, args, kwargs)
        future = self._await(pending, pending.lsn if lsn_result else result)
        del args, kwargs  # not kept alive while the commit waits for its fsync
        return await future

    wrapped = functools.wraps(getattr(Journal, name))(call)
    wrapped.__doc__ = f"Awaitable `Journal.{name}`: " + (getattr(Journal, name).__doc__ or "")
    return wrapped


for _kind in KINDS:  # the transition methods of `Journal`, one per event kind, each awaitable here
    setattr(AsyncJournal, _kind.call, _awaitable(_kind))


def _lsn_of(pending) -> int:
    return pending.lsn


class _Outcome:
    """A batch's outcome: futures[i] gets results[i] if i < durable (commit pendings[i] is
    durable), else `error`. A batch's pendings are held until their futures are settled, and
    freed in the loop's turns that settle them, among the allocations of the commits their
    coroutines make next: the garbage collector counts allocations minus frees, so frees spread
    among allocations offset them instead of leaving the allocations to trigger collections."""

    __slots__ = ("pendings", "futures", "results", "durable", "error")

    def __init__(self, pendings: list, futures: list, results: list, durable: int,
                 error: BaseException | None):
        self.pendings, self.futures, self.results = pendings, futures, results
        self.durable, self.error = durable, error


def _settle(loop: asyncio.AbstractEventLoop, outcome: _Outcome, start: int, per_turn: int) -> None:
    """Settle at most `per_turn` of `loop`'s futures of the outcome from index `start` on, the
    rest in the loop's next turns."""
    futures, results, durable, error = outcome.futures, outcome.results, outcome.durable, outcome.error
    i, n, settled = start, len(futures), 0
    while i < n and settled < per_turn:
        future = futures[i]
        if future is not None and future.get_loop() is loop:
            if not future.cancelled():
                if i < durable:
                    future.set_result(results[i])
                else:
                    future.set_exception(error)
                settled += 1
            # freed once its coroutine resumed, not with the batch
            outcome.pendings[i] = futures[i] = results[i] = None
        i += 1
    if i < n:
        loop.call_soon(_settle, loop, outcome, i, per_turn)
