"""What `Session.take` records and refuses: the fingerprint of what the trainer gets (the collated
prompt, so a changed `collate_fn` is caught at the restart as an edited row is, while journals
that recorded the row's fingerprint still restore), an idx outside the dataset, a batch whose
rows are not what the loader makes of `dataset[idx]`, and a row taken again while it is live in
the same epoch. Each refusal writes nothing and names the row and what to do."""

from __future__ import annotations

import pytest
import torch

from journal import GroupRef, Journal
from replay import BatchMismatch, RowChanged, RowOutOfRange, TakenTwice, fingerprint


from tests.replay.test_session import DATASET, Run, collate
from tests.replay.test_session_calls import refused


def collate_with_bang(rows):   # the same rows, collated otherwise: what the trainer gets changed
    out = collate(rows)
    out["task_name"] = [t + "!" for t in out["task_name"]]
    return out


def collate_with_a_key(rows):
    return {**collate(rows), "extra": [0] * len(rows)}


@pytest.mark.parametrize("changed", [collate_with_bang, collate_with_a_key])
def test_a_changed_collate_fn_is_caught_at_the_restart(fast_tmp, changed):
    """In flight and in the dataset's sample alike: the take recorded the collated prompt's
    fingerprint, so a restart whose collate_fn makes something else of the same rows raises
    RowChanged, naming the group and saying what to do; the same collate_fn opens."""
    run = Run(fast_tmp)
    with run.open() as s:
        gids = s.take(next(s.batches()))
        s.checkpoint(1, save=lambda: None)
    with pytest.raises(RowChanged, match=rf"group {gids[0]}: dataset\[0\] changed .*collate_fn") as info:
        run.open(collate_fn=changed)
    assert 'Session.open(..., on_row_changed="warn")' in str(info.value)
    with run.open() as s:
        assert [w.group_id for w in s.resume_work] == gids
        assert s.resume_work[0].prompt == collate([DATASET[0]])
        s.admit(gids, step=2, rollouts=2)
        for g in gids:
            for r in s.pending(g):
                s.seal(g, r.index, r.attempt, {"r": r.index})
        s.trained(gids, step=2)
        s.checkpoint(2, save=lambda: None)
    with pytest.raises(RowChanged, match=r"dataset\[\d\] changed"):   # nothing in flight: the sample
        run.open(collate_fn=changed)


def test_journals_that_recorded_the_rows_fingerprint_still_restore(fast_tmp):
    """A take written before the prompt was fingerprinted (the row's fingerprint, as the
    low-level API records it) restores in a session with a collate_fn, without a word."""
    run = Run(fast_tmp)
    with Journal.open(run.jdir) as j:
        gids = j.taken([GroupRef(idx=i, task_name=DATASET[i]["task_name"], epoch=0,
                                 fingerprint=fingerprint(DATASET[i])) for i in (3, 4)],
                       dataset_size=len(DATASET))
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    with run.open() as s:   # on_row_changed="error": a fingerprint it did not match would raise
        assert [(w.group_id, w.prompt["idx"]) for w in s.resume_work] == [(gids[0], [3]), (gids[1], [4])]


def test_take_records_the_fingerprint_of_the_collated_prompt(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        gids = s.take(next(s.batches()))
        assert [s.journal.group(g).fingerprint for g in gids] == [fingerprint(collate([DATASET[i]]))
                                                                  for i in (0, 1)]


def test_an_idx_outside_the_dataset_is_refused_naming_it(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        for idx in (10, -1):
            refused(s, RowOutOfRange, rf"row 1 of the batch has idx {idx}, outside the dataset: the dataset "
                    r"has 10 rows \(idx 0 to 9\)", lambda: s.take([DATASET[2], {"idx": idx, "task_name": "a"}]))
        assert isinstance(RowOutOfRange("x"), IndexError)   # what the bare error was


def _batch(*idx):
    return collate([DATASET[i] for i in idx])


@pytest.mark.parametrize("batch, words", [
    (lambda: {**_batch(2, 3), "x": torch.tensor([9.0, 3.0])}, r"dataset rows \[2, 3\] .*other values under \['x'\]"),
    (lambda: {**_batch(2, 3), "task_name": ["a", "a"]}, r"row 1 of the batch names idx 3, task_name 'a', but "
                                                        r"dataset\[3\] has task_name 'b'"),
    (lambda: {"idx": [2, 3], "task_name": ["a", "b"]}, r"keys the batch lacks: \['x'\]"),
    (lambda: [DATASET[2], dict(DATASET[3], x=7.0)], r"row 1 of the batch says idx 3, but it is not dataset\[3\]"),
])
def test_a_batch_that_is_not_what_the_loader_makes_of_its_rows_is_refused(fast_tmp, batch, words):
    """A hand-made or altered batch: the journal would record dataset[idx] while the trainer
    trains on something else, and a restore would hand back another prompt."""
    run = Run(fast_tmp)
    with run.open() as s:
        refused(s, BatchMismatch, words + ".*as the loader yielded it", lambda: s.take(batch()))
        assert len(s.take(_batch(2, 3))) == 2   # the same rows as the loader makes them


def test_a_live_row_taken_again_in_the_same_epoch_is_refused(fast_tmp):
    """The same batch twice would put two groups in flight for each row (trained twice); a row
    whose group is gone, or one of another epoch, is taken again."""
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        batch = next(batches)
        gids = s.take(batch)
        refused(s, TakenTwice, rf"dataset\[0\] \(row 0 of the batch\) is live already as group {gids[0]} "
                r"\(RESERVED\), taken in epoch 0", lambda: s.take(batch))
        refused(s, TakenTwice, r"dataset\[4\] is rows 0 and 1 of the batch", lambda: s.take(_batch(4, 4)))
        s.discard(gids, reason="bad prompt")
        assert len(s.take(batch)) == 2   # dropped: no longer live
        while s.epoch == 0:
            next(batches)
        s.take(_batch(0, 1))   # taken again in epoch 0 and live, but this is epoch 1
        s.checkpoint(1, save=lambda: None)
    with run.open() as s:   # the restart knows the rows live in its epoch
        assert s.epoch == 1
        with pytest.raises(TakenTwice, match=r"dataset\[0\]"):
            s.take(_batch(0, 5))
