"""Rehydration: rebuild each recovered group's prompt from the dataset, and check it is the
same row that was taken (its idx, its task, its content fingerprint)."""

from __future__ import annotations

import operator
import warnings
from typing import Any, Callable, Mapping, Sequence

from journal.state import SampledRow
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


def prompt_of(row: Any, collate_fn: Callable | None) -> Any:
    """What the trainer gets for one row: `collate_fn([row])`, or the row itself without one."""
    return collate_fn([row]) if collate_fn is not None else row


def prompt_fingerprint(prompt: Any) -> bytes | None:
    """The fingerprint of what the trainer gets (so that a changed `collate_fn` is caught as an
    edited row is); None when the prompt holds a value a fingerprint cannot encode (a take then
    records the row's fingerprint, as journals written before this did)."""
    try:
        return fingerprint(prompt)
    except TypeError:
        return None


def locator_mismatch(row: Any, idx: int, task_name: str | None) -> str | None:
    """How `row` (dataset[idx]) contradicts the locator `(idx, task_name)`: its own idx or
    task_name field differs; None when it does not."""
    own_idx = _field(row, "idx")
    if own_idx is not _ABSENT and _as_int(own_idx) != idx:
        return f"dataset[{idx}] is the row with idx {own_idx!r}"
    own_task = _field(row, "task_name")
    if task_name is not None and own_task is not _ABSENT and own_task != task_name:
        return f"dataset[{idx}] has task_name {own_task!r}, not {task_name!r}"
    return None


def _same_row(row: Any, prompt: Any, gid: int, idx: int, task_name: str | None, recorded: bytes | None,
              on_row_changed: str, collated: bool) -> bool:
    """Check `row` (dataset[idx]) is the one group `gid` took: its own idx and task, then the
    fingerprint recorded at the take, that of the prompt (`collated`: `collate_fn([row])`) or,
    in journals written before, of the row, by the policy. Returns False when it differs and
    was accepted."""
    mismatch = locator_mismatch(row, idx, task_name)
    if mismatch is not None:
        raise RowMismatch(f"group {gid}: {mismatch} (the journal's locator: idx {idx}, task_name "
                          f"{task_name!r}): the dataset was reordered or is another; restore with the "
                          "dataset the run used")
    if recorded is None:
        return True
    at_prompt = prompt_fingerprint(prompt) if collated else None
    now = fingerprint(row)
    if recorded in (at_prompt, now):
        return True
    message = (f"group {gid}: dataset[{idx}] changed since it was taken (task {task_name!r}, fingerprint "
               f"{now.hex()} != recorded {recorded.hex()}"
               + (f"; of the collated prompt {at_prompt.hex()}" if at_prompt is not None else "")
               + "), or the collate_fn did (a take records what it makes of the row)")
    if on_row_changed == "error":
        raise RowChanged(message + ". To go on: put the row (and the collate_fn) back as they were, or "
                         "continue with the row as it is now: Session.open(..., on_row_changed=\"warn\") "
                         "(restore(..., on_row_changed=\"warn\") below a session); its rollouts sealed "
                         "from the old row are kept")
    if on_row_changed == "warn":
        warnings.warn(message + ": continuing with the row as it is now (on_row_changed=\"warn\")",
                      RowChangedWarning, stacklevel=4)
    return False


def rehydrate(groups: list, dataset: Any, collate_fn: Callable | None, on_row_changed: str,
              changed: list) -> None:
    """Set `prompt` on every group; rows whose fingerprint changed are appended to `changed`."""
    if on_row_changed not in ROW_CHANGED_POLICIES:
        raise ValueError(f"on_row_changed must be one of {ROW_CHANGED_POLICIES}, not {on_row_changed!r}")
    for g in groups:
        row = _row(dataset, g.group_id, g.idx)
        g.prompt = prompt_of(row, collate_fn)
        if not _same_row(row, g.prompt, g.group_id, g.idx, g.task_name, g.fingerprint, on_row_changed,
                         collate_fn is not None):
            changed.append(g)


def check_identity(dataset: Any, size: int | None, sample: Sequence[SampledRow],
                   on_row_changed: str, collate_fn: Callable | None = None) -> list[SampledRow]:
    """Check `dataset` is the one the history recorded: its length against `size` (the last
    `taken(dataset_size=)`), then every sampled row as `rehydrate` checks a recovered one
    (with the `collate_fn` the takes fingerprinted its prompt with).
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
        row = _row(dataset, r.group_id, r.idx)
        if not _same_row(row, prompt_of(row, collate_fn), r.group_id, r.idx, r.task_name, r.fingerprint,
                         on_row_changed, collate_fn is not None):
            changed.append(r)
    return changed
