"""Rehydration: rebuild each recovered group's prompt from the dataset, and check it is the
same row that was taken (its idx, its task, its content fingerprint)."""

from __future__ import annotations

import operator
import warnings
from typing import Any, Callable, Mapping, Sequence

from journal.fold import SampledRow
from journal.fingerprint import fingerprint

from .errors import RowChanged, RowChangedWarning, RowMismatch, RowMissing

ROW_CHANGED_POLICIES = ("error", "warn", "accept")


def _field(row: Any, name: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(name, _ABSENT)
    return getattr(row, name, _ABSENT)


_ABSENT = object()


def _as_int(value: Any) -> Any:
    """A row's own idx as an int when it is one (int, numpy or one-element tensor), else as is."""
    try:
        if hasattr(value, "numel") and value.numel() == 1:
            value = value.item()
        return operator.index(value)
    except (TypeError, ValueError, RuntimeError):
        return value


def _row(dataset: Any, gid: int, idx: int) -> Any:
    try:
        return dataset[idx]
    except (IndexError, KeyError) as exc:
        raise RowMissing(f"group {gid}: dataset[{idx}] does not exist ({exc!r}); the "
                         "dataset shrank or is not the one the run used") from None


def _same_row(row: Any, gid: int, idx: int, task_name: str | None, recorded: bytes | None,
              on_row_changed: str) -> bool:
    """Check `row` (dataset[idx]) is the one group `gid` took: its own idx and task, then its
    fingerprint by the policy. Returns False when the fingerprint differs and was accepted."""
    own_idx = _field(row, "idx")
    if own_idx is not _ABSENT and _as_int(own_idx) != idx:
        raise RowMismatch(f"group {gid}: dataset[{idx}] is the row with idx {own_idx!r}; "
                          "the dataset was reordered")
    own_task = _field(row, "task_name")
    if task_name is not None and own_task is not _ABSENT and own_task != task_name:
        raise RowMismatch(f"group {gid}: dataset[{idx}] has task_name {own_task!r}, the "
                          f"journal recorded {task_name!r}")
    if recorded is None:
        return True
    now = fingerprint(row)
    if now == recorded:
        return True
    message = (f"group {gid}: dataset[{idx}] changed since it was taken (task {task_name!r}, "
               f"fingerprint {now.hex()} != recorded {recorded.hex()})")
    if on_row_changed == "error":
        raise RowChanged(message)
    if on_row_changed == "warn":
        warnings.warn(message, RowChangedWarning, stacklevel=4)
    return False


def rehydrate(groups: list, dataset: Any, collate_fn: Callable | None, on_row_changed: str,
              changed: list) -> None:
    """Set `prompt` on every group; rows whose fingerprint changed are appended to `changed`."""
    if on_row_changed not in ROW_CHANGED_POLICIES:
        raise ValueError(f"on_row_changed must be one of {ROW_CHANGED_POLICIES}, not {on_row_changed!r}")
    for g in groups:
        row = _row(dataset, g.group_id, g.idx)
        if not _same_row(row, g.group_id, g.idx, g.task_name, g.fingerprint, on_row_changed):
            changed.append(g)
        g.prompt = collate_fn([row]) if collate_fn is not None else row


def check_identity(dataset: Any, size: int | None, sample: Sequence[SampledRow],
                   on_row_changed: str) -> list[SampledRow]:
    """Check `dataset` is the one the history recorded: its length against `size` (the last
    `taken(dataset_size=)`), then every sampled row as `rehydrate` checks a recovered one.
    Returns the sampled rows whose fingerprint differs and the policy accepted."""
    if size is not None:
        try:
            have = len(dataset)
        except TypeError:
            have = None  # no length (an iterable or lazy dataset): the sample still checks it
        if have is not None and have != size:
            raise RowMismatch(f"the dataset has {have} rows, the journal recorded {size} (the "
                              "length passed as taken(dataset_size=)); restore with the dataset "
                              "the run used, or without dataset= to skip the checks")
    changed = []
    for r in sample:
        if not _same_row(_row(dataset, r.group_id, r.idx), r.group_id, r.idx, r.task_name,
                         r.fingerprint, on_row_changed):
            changed.append(r)
    return changed
