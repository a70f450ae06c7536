"""A call's rows and the commit naming them, made durable as one step that the calls in flight
share (`RowCommits`): `seal` and `progress` of a session whose data plane stores rows in
batches (`RowStore.BATCHES`, `LocalDataPlane`).

A call queues its rows and its commit (a function filling a `journal.Transaction`) and waits
once. The first caller that finds no batch of rows being written leads: it takes every queued
call and stores their rows in one write and one fdatasync (`store_batch`); then it hands the
writing of rows to the oldest caller still queued (who writes the next batch meanwhile) and
commits its own batch: each call's commit is checked and folded (`Journal.submit`: a refused
one, such as a late attempt, raises for its call alone and its rows are deleted) and every
commit of the batch is made durable by the journal's group commit, one fsync with whatever
else was committed meanwhile. Only then is each call handed its outcome. So:

* rows are durable before the commit naming them is even checked (`snapshot/data_plane.py`);
* no call returns before its rows and its commit are durable;
* the rows of batch k+1 are written while the commits of batch k are fsynced.

A call of a coroutine (`submit`) cannot lead on the event loop's thread: a worker thread of
this object leads for it, and the loop is handed the outcomes of a batch in one callback.
Superseded rows (a prefix a seal or a newer prefix ends, the rows of a refused commit) are
deleted once per batch, by the caller that led it, before the batch's calls return.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from _thread import allocate_lock
from typing import Any, Callable

from journal import JournalFailed, Transaction

from ..data_plane.rows import encode_rows

_QUEUED, _TAKEN, _DONE = range(3)


class _Call:
    """One call: its rows (encoded by the caller that writes its batch), its commit and what the
    commit's durability leaves to delete (`after(result)`: locators), then its outcome."""

    __slots__ = ("locator", "rows", "fill", "after", "state", "result", "error", "waiter", "future")

    def __init__(self, locator: str, rows: Any, fill: Callable[[Transaction], Any],
                 after: Callable[[Any], list[str]]):
        self.locator, self.rows, self.fill, self.after = locator, rows, fill, after
        self.state, self.result, self.error = _QUEUED, None, None
        self.waiter = None   # the held lock a sleeping caller waits on
        self.future: asyncio.Future | None = None


class RowCommits:
    """The durable steps of one session: `run` (a thread's call) and `submit` (a coroutine's).
    `refused(exc, locator)`: whether rows whose commit raised `exc` are to be deleted;
    `drop(superseded, refused)`: deletes the rows durable commits superseded and those of
    refused commits."""

    def __init__(self, journal, plane, *, refused: Callable[[BaseException, str], bool],
                 drop: Callable[[list[str], list[str]], None]):
        self._journal, self._plane, self._refused, self._drop = journal, plane, refused, drop
        self._lock = allocate_lock()
        self._queue: list[_Call] = []
        self._writing = False       # a caller is storing a batch of rows
        self._helpers: concurrent.futures.ThreadPoolExecutor | None = None
        self._helping = False       # a worker thread is asked to lead for queued coroutines' calls

    # -- the two ways in ----------------------------------------------------------------------

    def run(self, locator: str, rows: Any, fill: Callable[[Transaction], Any],
            after: Callable[[Any], list[str]]) -> Any:
        """Store `rows` under `locator` and commit `fill`, durably, sharing both with the calls
        in flight; returns what `fill` returned, or raises the error of the rows or of the
        commit (the commit is made only when the rows are durable)."""
        call = _Call(locator, rows, fill, after)
        lock = self._lock
        lock.acquire()
        self._queue.append(call)
        try:
            while call.state != _DONE:
                if call.state == _QUEUED and not self._writing:
                    self._lead()
                else:
                    self._sleep(call)
        finally:
            lock.release()
        if call.error is not None:
            raise call.error
        return call.result

    def submit(self, locator: str, rows: Any, fill: Callable[[Transaction], Any],
               after: Callable[[Any], list[str]]) -> asyncio.Future:
        """`run` for a coroutine: queues the call and returns the future of its outcome (a
        worker thread stores the rows)."""
        call = _Call(locator, rows, fill, after)
        call.future = asyncio.get_running_loop().create_future()
        with self._lock:
            self._queue.append(call)
            if not self._writing:
                self._help()
        return call.future

    def close(self) -> None:
        """Wait for the worker threads (no call may be in flight)."""
        if self._helpers is not None:
            self._helpers.shutdown(wait=True)

    # -- leading -----------------------------------------------------------------------------

    def _sleep(self, call: _Call) -> None:
        """Let go of the lock until `call` is done or handed the writing of rows (lock held)."""
        waiter = allocate_lock()
        waiter.acquire()
        call.waiter = waiter
        self._lock.release()
        try:
            waiter.acquire()
        finally:
            self._lock.acquire()
            if call.waiter is waiter:   # interrupted: let another caller write the rows
                call.waiter = None
                if not self._writing:
                    self._hand_over()

    def _lead(self) -> None:
        """Take every queued call, store their rows, hand the writing on and commit them
        (lock held on entry and on return, let go meanwhile)."""
        batch, self._queue = self._queue, []
        for call in batch:
            call.state = _TAKEN
        self._writing = True
        self._lock.release()
        drop: list[str] = []
        refused: list[str] = []
        handed = False
        try:
            stored = self._store(batch)
            with self._lock:
                self._writing = False
                self._hand_over()
            handed = True
            self._commit(batch, stored, drop, refused)
        except BaseException as exc:  # an interrupt (or a bug): its callers must not wait forever
            for call in batch:
                call.error = call.error or exc
            raise
        finally:
            try:
                if drop or refused:
                    self._drop(drop, refused)
            finally:
                self._lock.acquire()
                if not handed:
                    self._writing = False
                    self._hand_over()
                self._settle(batch)

    def _hand_over(self) -> None:
        """No rows are being written: the oldest queued caller writes the next batch, a worker
        thread when only coroutines' calls are queued (lock held)."""
        for call in self._queue:
            if call.waiter is not None:
                waiter, call.waiter = call.waiter, None
                waiter.release()
                return
        if self._queue:
            self._help()

    def _help(self) -> None:
        """Ask a worker thread to lead (lock held): two, so that one writes rows while the
        other commits."""
        if self._helping:
            return
        if self._helpers is None:
            self._helpers = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="row-commits")
        self._helping = True
        self._helpers.submit(self._lead_for_coroutines)

    def _lead_for_coroutines(self) -> None:
        with self._lock:
            self._helping = False
            if self._queue and not self._writing:
                self._lead()

    # -- the two stages ---------------------------------------------------------------------------

    def _store(self, batch: list[_Call]) -> list[BaseException | None]:
        """The rows of `batch` encoded (here, on one thread: 64 callers hashing at once would
        hand the GIL back and forth) and durable in one write and one fdatasync: an outcome
        per call (a call whose rows do not encode fails alone)."""
        items, outcomes, at = [], [None] * len(batch), []
        for k, call in enumerate(batch):
            try:
                items.append((call.locator, encode_rows(call.rows)))
                at.append(k)
            except Exception as exc:  # RowsNotStorable: this call's
                outcomes[k] = exc
            call.rows = None
        try:
            stored = self._plane.store_batch(items) if items else []
        except BaseException as exc:  # listing the directory: the whole batch's
            stored = [exc] * len(items)
        for k, error in zip(at, stored):
            outcomes[k] = error
        return outcomes

    def _commit(self, batch: list[_Call], stored: list[BaseException | None], drop: list[str],
                refused: list[str]) -> None:
        """Check, fold and queue the commit of every call whose rows are durable, then wait
        for their fsync; each call's result or error, the rows its durable commit supersedes
        in `drop`, the rows of a refused one in `refused`."""
        journal, queued = self._journal, []
        for call, error in zip(batch, stored):
            if error is not None:
                call.error = error
                continue
            try:
                pending, call.result = journal.submit(call.fill)
            except Exception as exc:  # refused (an ownership rule, a failed journal): this call's
                call.error = exc
                if self._refused(exc, call.locator):
                    refused.append(call.locator)
                continue
            if pending is not None:
                queued.append((call, pending.lsn))
        if queued:
            try:
                journal.wait_durable(queued[-1][1])
            except JournalFailed as exc:
                durable = journal.durable_lsn
                for call, lsn in queued:
                    if lsn > durable:
                        call.error = exc
        for call in batch:
            if call.error is None:
                drop += call.after(call.result)

    def _settle(self, batch: list[_Call]) -> None:
        """Hand each call its outcome: wake the sleeping callers, settle the coroutines'
        futures in one callback per loop (lock held)."""
        loops: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        for call in batch:
            call.state = _DONE
            call.fill = call.after = None
            if call.future is not None:
                loops.setdefault(call.future.get_loop(), []).append(call)
            elif call.waiter is not None:
                waiter, call.waiter = call.waiter, None
                waiter.release()
        for loop, calls in loops.items():
            loop.call_soon_threadsafe(_settle_futures, calls)


def _settle_futures(calls: list[_Call]) -> None:
    for call in calls:
        if not call.future.cancelled():
            if call.error is not None:
                call.future.set_exception(call.error)
            else:
                call.future.set_result(call.result)
