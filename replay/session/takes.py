"""What `take` records for the rows of a batch, and what it refuses (before anything is written).

Per row: its locator (idx, task_name, the epoch) and the fingerprint of its prompt, what the
trainer gets for it (`collate_fn([dataset[idx]])`): a restore rebuilds and checks exactly that,
so a changed `collate_fn` is caught as an edited row is. Refused, naming the row:

- an idx outside the dataset (`RowOutOfRange`);
- a row whose own idx or task_name field is not the batch's, and a batch that is not what the
  loader makes of its rows (`BatchMismatch`): a list of rows must be those rows, a mapping
  must be `collate_fn` of them (a loader's batch is, value for value). With `key=` the batch's
  shape is the trainer's own and only its rows are checked; without a `collate_fn` a mapping's
  columns are not;
- a row live already that was taken in the same epoch, the same batch taken twice
  (`TakenTwice`): a loader hands out each row once per epoch. Checked under the journal's lock
  against the groups taken in the current epoch (`LiveTakes`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from journal import GroupRef, Journal
from journal.fingerprint import fingerprint

from ..rehydrate import locator_mismatch, prompt_fingerprint, prompt_of
from .batch import Key, rows_of
from .errors import BatchMismatch, RowOutOfRange, TakenTwice

_AS_THE_LOADER_YIELDED = ("pass take() each batch as the loader yielded it (Session.open(key=...) reads "
                          "the rows of another batch shape)")


class Takes:
    """The rows of a session's takes: the dataset they come from and what the trainer gets of
    them (`collate_fn`), the batch shape (`key`), and the rows taken in the current epoch."""

    def __init__(self, dataset: Any, collate_fn: Callable | None, key: Key | None):
        self.dataset, self.collate_fn, self.key = dataset, collate_fn, key
        self.live = LiveTakes()

    def refs(self, batch: Any, epoch: int) -> list[GroupRef]:
        """The locators `taken` records for the rows of `batch`, in order, once the batch passed
        the checks above (the retake check is `live`'s, under the journal's lock)."""
        pairs = rows_of(batch, self.key)
        if self.dataset is None:
            return [GroupRef(idx=idx, task_name=task, epoch=epoch) for idx, task in pairs]
        size = len(self.dataset) if hasattr(self.dataset, "__len__") else None
        rows = [self._row(n, idx, size) for n, (idx, _task) in enumerate(pairs)]
        for n, ((idx, task), row) in enumerate(zip(pairs, rows)):
            mismatch = locator_mismatch(row, idx, task)
            if mismatch is not None:
                raise BatchMismatch(f"take(): row {n} of the batch names idx {idx}, task_name {task!r}, but "
                                    f"{mismatch}: {_AS_THE_LOADER_YIELDED}")
        if self.key is None:
            self._check_batch(batch, [idx for idx, _task in pairs], rows)
        return [GroupRef(idx=idx, task_name=task, epoch=epoch,
                         fingerprint=prompt_fingerprint(prompt_of(row, self.collate_fn)) or fingerprint(row))
                for (idx, task), row in zip(pairs, rows)]

    def _row(self, n: int, idx: int, size: int | None) -> Any:
        """`dataset[idx]`, for row `n` of a batch (`size`: the dataset's length, if it has one)."""
        ds = self.dataset
        why = (f"the dataset has {size} rows (idx 0 to {size - 1})" if size is not None
               else "the dataset has no such row")
        if idx < 0 or (size is not None and idx >= size):
            raise RowOutOfRange(f"take(): row {n} of the batch has idx {idx}, outside the dataset: {why}; "
                                f"{_AS_THE_LOADER_YIELDED}")
        try:
            return ds[idx]
        except (IndexError, KeyError) as exc:
            raise RowOutOfRange(f"take(): row {n} of the batch has idx {idx}, outside the dataset: "
                                f"dataset[{idx}] raised {exc!r}; {_AS_THE_LOADER_YIELDED}") from None

    def _check_batch(self, batch: Any, idx: list[int], rows: list) -> None:
        """`batch` is what the loader makes of `rows`: those rows, or `collate_fn` of them."""
        if not isinstance(batch, Mapping):
            for n, (item, row) in enumerate(zip(batch, rows)):
                if item is not row and prompt_fingerprint(item) != prompt_fingerprint(row):
                    raise BatchMismatch(f"take(): row {n} of the batch says idx {idx[n]}, but it is not "
                                        f"dataset[{idx[n]}]: {_AS_THE_LOADER_YIELDED}")
            return
        if self.collate_fn is None:
            return
        expected = self.collate_fn(rows)
        got, want = prompt_fingerprint(batch), prompt_fingerprint(expected)
        if got is not None and want is not None and got != want:
            raise BatchMismatch(f"take(): the batch of dataset rows {idx} is not what collate_fn makes of "
                                f"them ({_differences(batch, expected)}), so the journal would record rows "
                                f"the trainer did not get: {_AS_THE_LOADER_YIELDED}")


def _differences(batch: Mapping, expected: Any) -> str:
    """Which keys of `batch` differ from `collate_fn`'s batch `expected`, in words."""
    if not isinstance(expected, Mapping):
        return f"collate_fn makes a {type(expected).__name__}, the batch is a {type(batch).__name__}"
    out = []
    if only := sorted(map(str, batch.keys() - expected.keys())):
        out.append(f"keys only in the batch: {only}")
    if only := sorted(map(str, expected.keys() - batch.keys())):
        out.append(f"keys the batch lacks: {only}")
    if other := sorted(str(k) for k in batch.keys() & expected.keys()
                       if prompt_fingerprint(batch[k]) != prompt_fingerprint(expected[k])):
        out.append(f"other values under {other}")
    return "; ".join(out)


class LiveTakes:
    """The rows taken in the current epoch (idx -> group id), to refuse a row taken again while
    its group is live. Built from the journal's live groups when the epoch changes, then kept by
    `note`; read and written under the journal's lock (inside a commit's fill)."""

    def __init__(self):
        self._epoch: int | None = None
        self._groups: dict[int, int] = {}

    def refuse_retaken(self, journal: Journal, refs: list[GroupRef]) -> None:
        """`TakenTwice` when a row of `refs` (all of one epoch) is live already, taken in that
        epoch, or named twice."""
        epoch = refs[0].epoch
        if epoch != self._epoch:
            self._epoch = epoch
            self._groups = {g.idx: g.group_id for g in journal.groups() if g.epoch == epoch}
        first: dict[int, int] = {}
        for n, ref in enumerate(refs):
            gid = self._groups.get(ref.idx)
            live = journal.group(gid) if gid is not None else None
            if live is not None:
                raise TakenTwice(f"take(): dataset[{ref.idx}] (row {n} of the batch) is live already as group "
                                 f"{gid} ({live.owner.name}), taken in epoch {epoch}: the same batch taken twice? "
                                 "Take each batch the loader yields once; a failed rollout is generated "
                                 "again (s.fail returns its next attempt), a failed group replaced by a spare "
                                 "(s.replace)")
            if ref.idx in first:
                raise TakenTwice(f"take(): dataset[{ref.idx}] is rows {first[ref.idx]} and {n} of the batch: "
                                 "a loader hands out each row once per epoch")
            first[ref.idx] = n

    def note(self, refs: list[GroupRef], gids: list[int]) -> None:
        self._groups.update((ref.idx, gid) for ref, gid in zip(refs, gids))
