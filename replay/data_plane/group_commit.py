"""Group commit: threads that write at once share one write and one fsync.

A submitter queues its items under the caller's lock. With no batch in flight it leads: it
takes every item queued so far, lets go of the lock while `write(batch)` runs, takes it back,
calls `written(batch)` (still under the lock, before anyone hears the batch is done) and
wakes the waiters whose items are all done, and the oldest other one, which leads the next
batch. Otherwise it sleeps on a lock of its own until woken so: a batch wakes the threads it
concerns, not every waiting thread. A failed batch hands its error to every item in it.

Items nobody waits for (`submit(..., wait=False)` while a batch is in flight) go with the next
batch; with no waiter left to lead it, the leader that finishes writes them before it returns.
"""

from __future__ import annotations

import threading
from _thread import allocate_lock
from typing import Any, Callable, Sequence


class Item:
    """One queued write: `done` once its batch ran; `error` what that batch raised."""

    done: bool = False
    error: BaseException | None = None


class GroupCommit:
    def __init__(self, lock: threading.Lock, write: Callable[[list], None],
                 written: Callable[[list], None]):
        self._lock = lock
        self._write, self._written = write, written
        self._queue: list[Item] = []
        self._leading = False
        self._waiting: list[tuple[list[Item], Any]] = []   # (items awaited, the lock to wake)

    @property
    def leading(self) -> bool:
        """Whether a batch is being written (lock held)."""
        return self._leading

    def submit(self, items: Sequence[Item], queued: Sequence[Item] = (), *, wait: bool = True) -> None:
        """Queue `items` and return once the batches holding them and the `queued` ones (items
        another caller queued) were written, or raise their error; without `wait`, return at
        once when a batch is in flight (the items go with the next one, their errors
        unreported). The lock is held on entry and on return."""
        self._queue.extend(items)
        if not wait and self._leading:
            return
        awaited = [*items, *queued]
        while not all(item.done for item in awaited):
            if self._leading:
                self._sleep(awaited)
                continue
            batch, self._queue = self._queue, []
            self._lead(lambda: self._write(batch), batch)
        for item in awaited:
            if item.error is not None:
                raise item.error

    def exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` as a batch of its own: no write runs meanwhile (the lock is let go while it
        runs, held on entry and on return)."""
        while self._leading:
            self._sleep([])
        return self._lead(fn, [])

    def _sleep(self, awaited: list[Item]) -> None:
        """Let go of the lock until a batch ends that finishes `awaited` (for [], any batch) or
        hands this thread the lead."""
        waiter = allocate_lock()
        waiter.acquire()
        entry = (awaited, waiter)
        self._waiting.append(entry)
        self._lock.release()
        try:
            waiter.acquire()
        finally:
            self._lock.acquire()
            if entry in self._waiting:   # interrupted: let another one lead
                self._waiting.remove(entry)
                if not self._leading:
                    self._wake()

    def _wake(self) -> None:
        """Wake the waiters whose items are all done, and the oldest other one to lead."""
        left = []
        for entry in self._waiting:
            if all(item.done for item in entry[0]):
                entry[1].release()
            else:
                left.append(entry)
        if left:
            left.pop(0)[1].release()
        self._waiting = left

    def _lead(self, fn: Callable[[], Any], batch: list[Item]) -> Any:
        result = self._run(fn, batch)
        while self._queue and not self._waiting:   # items nobody waits for: written now
            left, self._queue = self._queue, []
            self._run(lambda: self._write(left), left)
        return result

    def _run(self, fn: Callable[[], Any], batch: list[Item]) -> Any:
        self._leading = True
        self._lock.release()
        error, result = None, None
        try:
            result = fn()
        except BaseException as exc:  # the batch's outcome, handed to every item in it
            error = exc
        finally:
            self._lock.acquire()
            self._leading = False
        if error is None and batch:
            try:
                self._written(batch)
            except BaseException as exc:  # (a bug): the waiters must not wait forever
                error = exc
        for item in batch:
            item.done, item.error = True, error
        self._wake()
        if error is not None and not batch:
            raise error
        return result
