"""The one retry policy of every request to a store: the shipper's, a fetch's (restore, verify,
audit, journal-inspect) and `replay.ObjectStoreDataPlane`'s.

A request that fails is tried again after a pause that starts at BACKOFF_FIRST and doubles up to
BACKOFF_MAX, until it succeeds, raises one of the caller's final exceptions (a verdict that
trying again does not change: passed on at once), or its budget runs out: a number of tries, a
deadline, or both (none: it is tried until it succeeds). Then `GaveUp` says how many tries
failed, with the last failure as its cause.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .errors import said

BACKOFF_FIRST = 0.05        # seconds before the first retry of a failed request
BACKOFF_MAX = 2.0

Deadline = Callable[[], "float | None"]


class GaveUp(Exception):
    """The budget ran out while the store kept failing; `tries` failed, `last` the last of them."""

    def __init__(self, what: str, tries: int, last: BaseException):
        super().__init__(f"{what} failed {tries} times, the last with {said(last)}")
        self.tries, self.last = tries, last


def retrying(fn: Callable[[], Any], what: str, *, final: tuple[type[BaseException], ...] = (),
             tries: int | None = None, deadline: float | Deadline | None = None,
             on_failure: Callable[[BaseException], None] | None = None) -> Any:
    """`fn()` under the policy. `deadline` is a `time.monotonic()` value, or a function giving
    one (None: no deadline), asked after each failure: a closing shipper sets one while a
    request is being retried. `on_failure(exc)` sees every failure that is retried or ends the
    budget."""
    delay, failed = BACKOFF_FIRST, 0
    while True:
        try:
            return fn()
        except final:
            raise
        except Exception as exc:
            failed += 1
            if on_failure is not None:
                on_failure(exc)
            limit = deadline() if callable(deadline) else deadline
            if tries is not None and failed >= tries or limit is not None and time.monotonic() + delay > limit:
                raise GaveUp(what, failed, exc) from exc
            time.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)
