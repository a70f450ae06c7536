"""The session: a trainer's integration in three steps (open, loop, checkpoint).

`Session.open` restores the latest committed checkpoint, loads the weights and the loader
state, and continues the journal; `resume_work` lists what was in flight; `take`, `admit`,
`seal` / `finish`, `fail`, `trained` journal the loop; `checkpoint` ties the trainer's
weights to the journal, reclaims rows and compacts. `AsyncSession` is the same over asyncio.
"""

from . import silenced  # noqa: F401  (torchdata's deprecation noise, in every trainer process)
from .aio import AsyncSession
from .batch import BatchShapeError
from .errors import (BatchMismatch, CheckpointUnsaved, LoadWeightsFailed, RowOutOfRange, RowsRegeneratedWarning,
                     SessionError, StepBeforeCheckpoint, TakenTwice)
from .files import durable_file
from .sync import Session
from .work import RolloutWork, Work

__all__ = ["Session", "AsyncSession", "Work", "RolloutWork", "SessionError", "LoadWeightsFailed", "BatchShapeError",
           "RowOutOfRange", "BatchMismatch", "TakenTwice", "StepBeforeCheckpoint", "CheckpointUnsaved",
           "RowsRegeneratedWarning", "durable_file"]
