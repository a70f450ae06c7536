"""Group commit: threads that write at once share one write and one fsync.

A submitter queues its items under the caller's lock. With no batch in flight it leads: it
takes every item queued so far, lets go of the lock while `write(batch)` runs, takes it back,
calls `written(batch)` (still under the lock, before anyone hears the batch is done) and
wakes the waiters. Otherwise it waits for the batch that holds its items. A failed batch
hands its error to every item in it; the next submitter leads the next batch.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence


class Item:
    """One queued write: `done` once its batch ran; `error` what that batch raised."""

    done: bool = False
    error: BaseException | None = None


class GroupCommit:
    def __init__(self, lock: threading.Lock, write: Callable[[list], None],
                 written: Callable[[list], None]):
        self._cond = threading.Condition(lock)
        self._write, self._written = write, written
        self._queue: list[Item] = []
        self._leading = False

    def submit(self, items: Sequence[Item], queued: Sequence[Item] = ()) -> None:
        """Queue `items` and return once the batches holding them and the `queued` ones (items
        another caller queued) were written, or raise their error. The lock is held on entry
        and on return."""
        self._queue.extend(items)
        items = [*items, *queued]
        while not all(item.done for item in items):
            if self._leading:
                self._cond.wait()
                continue
            batch, self._queue = self._queue, []
            self._lead(lambda: self._write(batch), batch)
        for item in items:
            if item.error is not None:
                raise item.error

    def exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` as a batch of its own: no write runs meanwhile (the lock is let go while it
        runs, held on entry and on return)."""
        while self._leading:
            self._cond.wait()
        return self._lead(fn, [])

    def _lead(self, fn: Callable[[], Any], batch: list[Item]) -> Any:
        self._leading = True
        self._cond.release()
        error, result = None, None
        try:
            result = fn()
        except BaseException as exc:  # the batch's outcome, handed to every item in it
            error = exc
        finally:
            self._cond.acquire()
            self._leading = False
        if error is None and batch:
            try:
                self._written(batch)
            except BaseException as exc:  # (a bug): the waiters must not wait forever
                error = exc
        for item in batch:
            item.done, item.error = True, error
        self._cond.notify_all()
        if error is not None and not batch:
            raise error
        return result
