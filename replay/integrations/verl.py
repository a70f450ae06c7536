"""verl's fully_async trainer (verl 0.9.1, `verl/experimental/fully_async_policy`) with an
ownership journal: no prompt lost, none trained twice, across `kill -9` and a resume (docs/verl.md).

    from replay.integrations.verl import (JournalOptions, JournaledFullyAsyncRollouter,
        JournaledFullyAsyncTrainer, ReportingQueueClient, reporting_queue_actor, run_fully_async)

The rollouter (a Ray actor) is the journal's one writer: it takes, admits, finishes and drops
prompts where verl moves them; the trainer journals `trained` and checkpoints through it.

Importing this module imports verl and checks its version (`UnsupportedVerlVersion`); `import
replay` never imports verl.
"""

from __future__ import annotations

import verl

from .verl_errors import (CheckpointNotCommitted, UnsupportedVerlConfig, UnsupportedVerlVersion,
                          VerlIntegrationError, VerlInternalsChanged)

SUPPORTED_VERL = "0.9.1"


def check_verl_version(version: str) -> None:
    if version != SUPPORTED_VERL:
        raise UnsupportedVerlVersion(
            f"verl {version} is installed; replay.integrations.verl is built and tested on verl {SUPPORTED_VERL} "
            f"(it relies on private names of verl's fully_async_policy, listed in docs/verl.md): install "
            f"'ownership-journal[verl]' (verl=={SUPPORTED_VERL}), or check those names in {version} first")


check_verl_version(verl.__version__)

from .verl_queue import ReportingMessageQueue, ReportingQueueClient, reporting_queue_actor  # noqa: E402
from .verl_rollouter import JournaledFullyAsyncRollouter, JournalOptions  # noqa: E402
from .verl_runner import run_fully_async  # noqa: E402
from .verl_trainer import JournaledFullyAsyncTrainer  # noqa: E402

__all__ = ["JournalOptions", "JournaledFullyAsyncRollouter", "JournaledFullyAsyncTrainer", "ReportingMessageQueue",
           "ReportingQueueClient", "reporting_queue_actor", "run_fully_async", "check_verl_version",
           "SUPPORTED_VERL", "VerlIntegrationError", "UnsupportedVerlVersion", "UnsupportedVerlConfig",
           "VerlInternalsChanged", "CheckpointNotCommitted"]
