"""Rehydration: rebuild each recovered group's prompt from the dataset, and check it is the
same row that was taken (its idx, its task, its content fingerprint)."""

from __future__ import annotations

import operator
import warnings
from typing import Any, Callable, Mapping

from .errors import RowChanged, RowChangedWarning, RowMismatch, RowMissing
from .fingerprint import fingerprint

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


def rehydrate(groups: list, dataset: Any, collate_fn: Callable | None, on_row_changed: str,
              changed: list) -> None:
    """Set `prompt` on every group; rows whose fingerprint changed are appended to `changed`."""
    if on_row_changed not in ROW_CHANGED_POLICIES:
        raise ValueError(f"on_row_changed must be one of {ROW_CHANGED_POLICIES}, not {on_row_changed!r}")
    for g in groups:
        try:
            row = dataset[g.idx]
        except (IndexError, KeyError) as exc:
            raise RowMissing(f"group {g.group_id}: dataset[{g.idx}] does not exist ({exc!r}); the "
                             "dataset shrank or is not the one the run used") from None
        own_idx = _field(row, "idx")
        if own_idx is not _ABSENT and _as_int(own_idx) != g.idx:
            raise RowMismatch(f"group {g.group_id}: dataset[{g.idx}] is the row with idx {own_idx!r}; "
                              "the dataset was reordered")
        own_task = _field(row, "task_name")
        if g.task_name is not None and own_task is not _ABSENT and own_task != g.task_name:
            raise RowMismatch(f"group {g.group_id}: dataset[{g.idx}] has task_name {own_task!r}, the "
                              f"journal recorded {g.task_name!r}")
        if g.fingerprint is not None:
            now = fingerprint(row)
            if now != g.fingerprint:
                message = (f"group {g.group_id}: dataset[{g.idx}] changed since it was taken "
                           f"(fingerprint {now.hex()} != recorded {g.fingerprint.hex()})")
                if on_row_changed == "error":
                    raise RowChanged(message)
                if on_row_changed == "warn":
                    warnings.warn(message, RowChangedWarning, stacklevel=3)
                changed.append(g)
        g.prompt = collate_fn([row]) if collate_fn is not None else row
