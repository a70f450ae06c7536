"""The session's two calls that store rows, then commit the locator they are stored under
(`seal` and `progress`), as `RowStep`s a facade runs: one after the other, or as one durable
step with the calls in flight (`row_commits.py`); and the deleting of the rows such commits
stop naming."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from journal import JournalWarning, Transaction
from snapshot.errors import DataPlaneError

from ..data_plane import names

if TYPE_CHECKING:
    from .core import Core

Fill = Callable[[Transaction], Any]


@dataclass
class RowStep:
    """A call that stores rows, then commits the locator they are stored under: `put(rows)`
    stores them (the locator), `fill(locator)` is the commit naming them, `after()` the rows
    to delete once it is durable. `locator` is known before the put when the session stores
    and commits as one step (`RowCommits`)."""

    put: Callable[[Any], str]
    locator: str | None
    fill: Callable[[str], Fill]
    after: Callable[[], list[str]]


def seal_step(core: Core, group_id: int, index: int, attempt: int, policy_version: int | None) -> RowStep:
    """`seal`: the rollout's rows, then `Core.seal_fill`; the prefix the seal ends is deleted."""
    plane = core.plane()
    return RowStep(lambda rows: plane.put_rollout(group_id, index, attempt, rows),
                   names.rollout_locator(group_id, index, attempt) if core.row_commits else None,
                   lambda loc: core.seal_fill(group_id, index, attempt, loc, policy_version),
                   lambda: core.prefix_moved(group_id, index, None))


def progress_step(core: Core, group_id: int, index: int, attempt: int, tokens: int, turn: int | None,
                  policy_version: int | None) -> RowStep:
    """`progress`: the prefix's rows (its attempt's next part), then `Core.progress_fill`; the
    prefix it supersedes is deleted."""
    plane = core.plane()
    part = core.next_part(group_id, index, attempt)
    located: list[str] = []   # the locator the commit named (the put's)

    def fill(loc: str) -> Fill:
        located.append(loc)
        return core.progress_fill(group_id, index, attempt, loc, tokens, turn, policy_version)
    return RowStep(lambda rows: plane.put_progress(group_id, index, attempt, part, rows),
                   names.progress_locator(group_id, index, attempt, part) if core.row_commits else None,
                   fill, lambda: core.prefix_moved(group_id, index, located[0]))


def drop_rows(core: Core, superseded: list[str], refused: list[str]) -> None:
    """Delete the rows durable commits stopped naming (superseded prefixes; counted as
    reclaimed) and those of refused commits. A failure leaves them as storage only, which the
    next open's sweep deletes: warned, not raised (the commits are durable)."""
    plane = core.plane()
    try:
        if refused:
            plane.delete(refused)
        gone = plane.delete(superseded) if superseded else 0
    except DataPlaneError as exc:
        warnings.warn(JournalWarning(f"data plane {plane!r}: rows no commit names could not be "
                                     f"deleted ({exc}); they only take storage until the next "
                                     "Session.open deletes them"), stacklevel=2)
        return
    core.count_reclaimed(gone)
