"""Row locators: the names both library data planes give rows, and their validation.

`g<group id>.rows` holds a group's rows (`put`), `g<group id>-r<index>-a<attempt>.rows` one
rollout attempt's (`put_rollout`), `g<group id>-r<index>-a<attempt>-p<part>.rows` the
`part`-th durable prefix of one (`put_progress`); numbers in decimal without leading zeros. A locator is a
plain file or object name: anything else (`..`, a path, another store's locator) is refused
with `InvalidLocator` before any I/O, so a locator read from a journal, a cut or a bucket
never reaches outside the store.
"""

from __future__ import annotations

import operator
import re

from snapshot.errors import InvalidLocator

SUFFIX = ".rows"
_NUMBER = r"(?:0|[1-9][0-9]*)"
_LOCATOR = re.compile(rf"g{_NUMBER}(?:-r{_NUMBER}-a{_NUMBER}(?:-p{_NUMBER})?)?{re.escape(SUFFIX)}")


def _number(value: int, what: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise InvalidLocator(f"{what} {value!r} is not an integer") from None
    if isinstance(value, bool) or n < 0:
        raise InvalidLocator(f"{what} {value!r} is not an integer >= 0")
    return n


def group_locator(group_id: int) -> str:
    """The locator of the rows of group `group_id`."""
    return f"g{_number(group_id, 'group id')}{SUFFIX}"


def rollout_locator(group_id: int, index: int, attempt: int) -> str:
    """The locator of rollout `index` of group `group_id` as attempt `attempt` produced it."""
    return (f"g{_number(group_id, 'group id')}-r{_number(index, 'rollout index')}"
            f"-a{_number(attempt, 'attempt')}{SUFFIX}")


def progress_locator(group_id: int, index: int, attempt: int, part: int) -> str:
    """The locator of the `part`-th prefix that attempt `attempt` of rollout `index` of group
    `group_id` recorded."""
    return rollout_locator(group_id, index, attempt)[:-len(SUFFIX)] + f"-p{_number(part, 'part')}{SUFFIX}"


def is_locator(name: object) -> bool:
    return isinstance(name, str) and _LOCATOR.fullmatch(name) is not None


def checked(locator: object, where: str) -> str:
    """`locator` if it is one of these names, else `InvalidLocator` naming the store `where`."""
    if not is_locator(locator):
        raise InvalidLocator(f"data plane {where}: {locator!r} is not a row locator (g<group>.rows, "
                             "g<group>-r<index>-a<attempt>.rows or g<group>-r<index>-a<attempt>-p<part>.rows); "
                             "it names no rows of this store")
    return locator
