"""The data plane: the trainer's store of rollout rows, keyed by locator. The whole protocol.

The journal records who owns each group; the rows a group's rollouts produced live in a data
plane, and the journal holds only their locators (`finished(locators=...)`, the `locator` of a
`RolloutRef` in `rollout_sealed`). The rules every implementation keeps:

* rows are durable under their locator before the journal names it (put, then journal);
* a locator is unique forever and the rows under it never change: group ids are never reused
  and a rollout's locator carries its attempt, so a late result of a given-up attempt never
  replaces the rows of the attempt that took its place. A put of other bytes under an
  existing locator is refused (`RowConflict`); an identical one is done already;
* a locator is a plain name of the data plane's own grammar, validated before any I/O
  (`InvalidLocator`): never `..`, an absolute path or a separator.

Restore calls `has` (are a REPLAY group's rows, a sealed rollout's row, a prefix's row still
there?),
compaction calls `save` (a cut carries the rows it needs in its `data_plane/`), the trainer
calls the rest. The library's implementations: `replay.LocalDataPlane` (rows packed into
append-only files in a directory) and `replay.ObjectStoreDataPlane` (immutable objects in a
bucket); both store rows in the row codec (`replay/data_plane/rows.py`, no pickle).
docs/data-planes.md describes both.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol, runtime_checkable

from journal import Group


def row_locators(group: Group) -> list[str]:
    """The locators of a group's rows: its sealed rollouts' for a group admitted with
    rollouts=N (`group.rollouts.locators`), else the one `finished` recorded (`group.locator`);
    none when no rows were journaled."""
    if group.rollouts is None:
        return [group.locator] if group.locator is not None else []
    return [loc for loc in group.rollouts.locators if loc is not None]


def prefix_locators(group: Group) -> list[str]:
    """The locators of the prefixes (`rollout_progress`) a group's unsealed rollouts hold now."""
    r = group.rollouts
    if r is None or r.progress is None:
        return []
    return [p.locator for p in r.progress if p is not None]


def cut_rows(group: Group) -> list[tuple[str, bool]]:
    """(locator, required) of the rows a cut carries for a group (`DataPlane.save`), everything
    a restore from the cut alone may hand back: its rows, required (a cut never silently lacks
    them), and its prefixes' rows, carried while the data plane has them (a trainer may have
    reclaimed a prefix the state still names; a restore from the cut then regenerates that
    rollout and reports the prefix in `lost_progress`)."""
    return [(loc, True) for loc in row_locators(group)] + [(loc, False) for loc in prefix_locators(group)]


@runtime_checkable
class DataPlane(Protocol):
    """The trainer's store of rollout rows. Rows are a tree of dict, list, tuple, str, int,
    float, bool, None, bytes, torch.Tensor and numpy.ndarray."""

    def put(self, group_id: int, rows: Any) -> str:
        """Store the rows of a group admitted without rollouts=; returns its locator, for
        `finished(locators=[...])`. Durable before it returns: a crash after the return never
        loses them; a crash before leaves nothing under the locator or the complete rows, never
        part of them (at most an unnamed leftover, which no locator lists)."""

    def put_rollout(self, group_id: int, index: int, attempt: int, rows: Any) -> str:
        """Store one rollout's rows as attempt `attempt` produced them; returns its locator (it
        names the attempt), for `rollout_sealed`. Durable before it returns, as `put`. When the
        journal refuses the seal (a stale attempt), delete the locator."""

    def put_progress(self, group_id: int, index: int, attempt: int, part: int, rows: Any) -> str:
        """Store a durable prefix of one rollout attempt's rows (the tokens so far, or the turns
        so far and the environment's exported state), the `part`-th that attempt records;
        returns its locator (it names the attempt and the part), for `rollout_progress`.
        Durable before it returns, as `put`. Once a newer prefix of the rollout, or its seal
        or failure, is journaled, the older prefix's row is no longer named by the journal."""

    def get(self, locator: str) -> Any:
        """The rows under `locator`, exactly as they were put. `RowsNotFound` when there are
        none, `RowsCorrupt` when the stored bytes do not decode."""

    def has(self, locator: str) -> bool:
        """Whether rows are stored under `locator` (restore asks it of every REPLAY group and
        sealed rollout it keeps; no decoding)."""

    def delete(self, locators: Iterable[str]) -> int:
        """Forget the rows under `locators` (rows no restore can need: trained at or before a
        committed checkpoint, given-up attempts); returns how many were there. Idempotent.
        Nothing needs to be durable: a crash may bring a deleted row back, which then only
        leaks storage until a sweep (delete what `locators()` lists and the journal does not
        name) removes it. Every locator is validated before the first one is deleted."""

    def locators(self) -> Iterator[str]:
        """Every locator with rows in the store (for sweeps and bounds), in no order; never a
        leftover of a put that crashed."""

    def save(self, directory: str, groups: list[Group]) -> None:
        """Write the rows of `groups` (`cut_rows(g)` each: a cut's REPLAY groups and the
        ADMITTED groups with sealed rollouts or prefixes) into `directory`, the cut's empty
        `data_plane/`, one file per locator named by it. `RowsNotFound` when a group's rows are
        missing (a prefix's row that is missing is left out, as `cut_rows` says). The cut writer fsyncs what was written and lists it in the
        cut's manifest; nothing is durable before that."""

    def import_cut(self, cut_dir: str) -> int:
        """Put the rows a cut carries (`cut_dir/data_plane/`) into this store, before a resume
        from that cut alone; returns how many locators it carries. Durable before it returns,
        as `put`; rows already stored with the same bytes count as imported, other bytes are a
        `RowConflict`, a file that fails its checksum is `RowsCorrupt` (nothing of it stored)."""
