"""The errors of the verl integration (`replay.integrations.verl`), each naming the version,
config field, sample or folder involved and what to do. A damaged checkpoint folder raises the
restore errors of its check (`replay.ManifestMissing`, `UnsafePath`, `MissingFile`,
`ChecksumMismatch`). Importing this module does not import verl.
"""

from __future__ import annotations

from ..session import SessionError


class VerlIntegrationError(SessionError):
    """Base class: the journaled verl trainer cannot run as asked."""


class UnsupportedVerlVersion(VerlIntegrationError):
    """The installed verl is not the version the integration was tested with: it reaches into
    verl's private names (docs/verl.md lists them), which move between releases."""


class UnsupportedVerlConfig(VerlIntegrationError):
    """A verl config (or dataset) under which a movement could not be journaled exactly: which
    field, its value, and the value to use."""


class VerlInternalsChanged(VerlIntegrationError):
    """verl handed the integration something its tested version never does (a sample id it did
    not take, a uid it did not set): the integration refuses to guess."""


class CheckpointNotCommitted(VerlIntegrationError):
    """The journal's committed checkpoint folder is gone, or verl asked to save a checkpoint the
    trainer did not announce."""
