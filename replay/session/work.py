"""`resume_work`: what a restore handed back, as one list in the order a trainer handles it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..recovered_state import RecoveredGroup, RecoveredRollout, RecoveredState

TRAIN, GENERATE, ADMIT = "train", "generate", "admit"


# one rollout of a recovered group, as restore hands it back (`resume_work`, `Session.pending`)
RolloutWork = RecoveredRollout


@dataclass
class Work:
    """One recovered group and what the trainer does with it (`kind`):

    - "train": it finished and its rows are in the data plane (`Session.rows(group_id)`);
      train it at `target_step`;
    - "generate": it was admitted and its generation was lost with the process: generate its
      unsealed `rollouts` (at least one; every rollout for a group admitted without
      `rollouts=`, whose `rollouts` is None), then seal or finish it;
    - "admit": it was taken and never admitted: admit it before taking new rows.

    `prompt` is `collate_fn([dataset[idx]])`, checked against the journal, when the session
    has a dataset. Groups in the replacement reserve are `Session.spares`."""

    kind: str
    group_id: int
    idx: int
    task_name: str | None
    epoch: int | None
    prompt: Any
    target_step: int | None
    policy_version: int | None
    rollouts: list[RolloutWork] | None
    # the versions that made its kept work (oldest, newest) and newest minus the restored step
    # (`RecoveredGroup`'s; each rollout has its own)
    policy_span: tuple[int, int] | None = None
    lead: int | None = None

    @property
    def pending(self) -> list[RolloutWork]:
        """The rollouts to generate (unsealed); empty for a group without `rollouts=`."""
        return [r for r in self.rollouts or () if not r.sealed]


def _work(kind: str, g: RecoveredGroup) -> Work:
    return Work(kind, g.group_id, g.idx, g.task_name, g.epoch, g.prompt, g.target_step,
                g.policy_version, None if g.rollouts is None else list(g.rollouts), g.policy_span, g.lead)


def _by_step(g: RecoveredGroup) -> tuple[int, int]:
    return (g.target_step if g.target_step is not None else -1, g.group_id)


def resume_work(state: RecoveredState) -> list[Work]:
    """The groups to train (finished: oldest target step first), then to generate (in the
    order they were due), then to admit (in the order they were taken)."""
    return ([_work(TRAIN, g) for g in sorted(state.replay, key=_by_step)]
            + [_work(GENERATE, g) for g in sorted(state.admitted, key=_by_step)]
            + [_work(ADMIT, g) for g in state.reserved])
