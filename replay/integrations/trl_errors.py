"""The errors of the TRL integration (`replay.integrations.trl`), each naming the version,
config field, group, folder or file involved and what to do. A damaged checkpoint folder raises the restore
errors of its check (`replay.ManifestMissing`, `UnsafePath`, `MissingFile`, `ChecksumMismatch`).
"""

from __future__ import annotations

from ..session import SessionError


class TrlIntegrationError(SessionError):
    """Base class: the journaled TRL trainer cannot run as asked."""


class UnsupportedTrlVersion(TrlIntegrationError):
    """The installed TRL is not the version the integration was tested with: it subclasses TRL's
    experimental trainer and reaches into its private names (docs/trl.md lists them), which move
    between releases."""


class UnsupportedTrlConfig(TrlIntegrationError):
    """An `AsyncGRPOConfig` (or trainer argument) under which "trained at step S" could not be
    journaled exactly: which field, its value, and the value to use."""


class GroupSplitAcrossSteps(TrlIntegrationError):
    """A group's samples did not all go into one optimizer step (or a generator returned another
    number of samples than `num_generations`), so the step that trained it is not one step."""


class CheckpointNotCommitted(TrlIntegrationError):
    """`resume_from_checkpoint` names a folder other than the journal's committed checkpoint, or
    the committed checkpoint's folder is gone."""
