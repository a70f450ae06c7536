"""Which dataset rows a loader batch holds: `(idx, task_name)` per row, read from the batch's
shape, or by the trainer's own key function."""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Sequence

Key = Callable[[Any], Sequence]


class BatchShapeError(TypeError):
    """A batch whose rows' dataset indices the session cannot find."""


def _index(value: Any, where: str) -> int:
    try:
        if hasattr(value, "numel") and value.numel() == 1:
            value = value.item()
        return operator.index(value)
    except (TypeError, ValueError, RuntimeError):
        raise BatchShapeError(f"{where} is {value!r}, not a dataset row number (an integer)") from None


def _as_list(value: Any) -> list:
    if hasattr(value, "tolist"):   # a tensor or numpy array
        value = value.tolist()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _from_columns(batch: Mapping) -> list[tuple[Any, Any]]:
    """A collated batch: `batch["idx"]` (a list or tensor) and optionally `batch["task_name"]`."""
    idx = _as_list(batch["idx"])
    tasks = batch.get("task_name")
    tasks = [None] * len(idx) if tasks is None else _as_list(tasks)
    if len(tasks) != len(idx):
        raise BatchShapeError(f"the batch holds {len(idx)} idx but {len(tasks)} task_name values")
    return list(zip(idx, tasks))


def _from_rows(batch: Sequence) -> list[tuple[Any, Any]]:
    """A list of rows (no collation), each a mapping with "idx" and optionally "task_name"."""
    return [(row["idx"], row.get("task_name")) for row in batch]


def rows_of(batch: Any, key: Key | None) -> list[tuple[int, str | None]]:
    """`(idx, task_name)` of each row of `batch`, in order. `key(batch)` returns, per row, its
    idx or an `(idx, task_name)` pair; without it the batch is a mapping with an "idx" column
    (and optionally "task_name"), or a sequence of such rows."""
    if key is not None:
        pairs = [item if isinstance(item, tuple) else (item, None) for item in key(batch)]
    elif isinstance(batch, Mapping) and "idx" in batch:
        pairs = _from_columns(batch)
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)) and batch \
            and all(isinstance(row, Mapping) and "idx" in row for row in batch):
        pairs = _from_rows(batch)
    else:
        raise BatchShapeError(
            f"take() cannot find the dataset rows of a {type(batch).__name__} batch: it reads an "
            "'idx' column (and 'task_name') of a mapping, or of each row of a list; for another "
            "shape pass Session.open(..., key=lambda batch: [(idx, task_name), ...])")
    out = []
    for n, (idx, task) in enumerate(pairs):
        if task is not None and not isinstance(task, str):
            raise BatchShapeError(f"row {n} of the batch has task_name {task!r}, not a str")
        out.append((_index(idx, f"row {n}'s idx"), task))
    if not out:
        raise BatchShapeError("take() of an empty batch: there is nothing to record")
    return out
