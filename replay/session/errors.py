"""What a session refuses and what it warns of, one class each: the message names the row,
group, step or path and says what a `Session` user does next. A refused call writes nothing."""

from __future__ import annotations

from journal import JournalWarning


class SessionError(ValueError):
    """A session call that cannot be made as asked (what is missing, and how to give it)."""


class LoadWeightsFailed(SessionError):
    """`load_weights(step)` raised while a session opened: the restored checkpoint's weights
    could not be loaded, so nothing was resumed (the journal was not opened)."""


class RowOutOfRange(SessionError, IndexError):
    """`take()` of a batch naming a row outside the dataset."""


class BatchMismatch(SessionError):
    """`take()` of a batch whose rows are not what the loader makes of `dataset[idx]` (a batch
    made or changed by hand): the journal would record rows the trainer never got."""


class TakenTwice(SessionError):
    """`take()` of a row that is live already, taken in the same epoch (the same batch taken
    twice): a loader hands out each row once per epoch."""


class StepBeforeCheckpoint(SessionError):
    """`trained(step=t)` with `t` below the step of a committed checkpoint: that checkpoint's
    weights cannot hold a training step that comes after it."""


class CheckpointUnsaved(SessionError):
    """A call made while a begun checkpoint's `save()` has failed: that checkpoint must be
    saved and committed first (`checkpoint(step)` again), or the trainer restarted."""


class RowsRegeneratedWarning(JournalWarning):
    """`Session.open`: the data plane no longer has rows the restored journal names, so their
    work is generated again (the message names the groups and rollouts)."""
