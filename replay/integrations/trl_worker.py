"""The rollout worker of the journaled TRL trainer: TRL's `RolloutWorkerProtocol` (`rollout_buffer`,
`metrics_queue`, `start`, `stop`, `update_model_version`, `check_health`) on the framework-neutral
`RolloutPipeline` (pipeline.py), and TRL's samples as data-plane rows.

`TrlRolloutWorker` is the worker without a journal: its buffer reaches TRL's staleness verdict,
and each group's samples carry the journal's group id and TRL's `model_version` of its dispatch.
`JournaledRolloutWorker` takes each prompt through the session (`take`, `admit`), journals the
group `finished` with its samples durable in the data plane before the first sample is queued,
and on a restart queues the restored finished groups from the data plane and regenerates the
restored in-flight ones before it takes a new prompt.
"""

from __future__ import annotations

import queue
import time
from typing import Callable

import numpy as np
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

from .pipeline import Generate, PromptGroup, RolloutPipeline, admit, finish, finished_groups, prompts
from .trl_errors import GroupSplitAcrossSteps


class StaleObservingBuffer(queue.Queue):
    """TRL's `rollout_buffer`, drained by `RolloutQueueDataset.__iter__` in the trainer's main thread.

    TRL drops a sample when `trainer.model_version - sample.model_version > max_staleness`, reading
    the version right after `get` returns, in the one thread that moves the version (a weight sync
    runs at a step's end, in the main thread). So `get` reaches TRL's verdict before TRL acts on it,
    and calls `on_stale(sample, staleness)` once per group (a group's samples share their version).
    Unbound (`version_fn` None) it is a plain queue. `put` stamps the sample's `enqueued_at` (TRL's
    time-in-queue metric)."""

    def __init__(self, maxsize: int = 0):
        super().__init__(maxsize)
        self.version_fn: Callable[[], int] | None = None
        self.max_staleness = 0
        self.on_stale: Callable[[RolloutSample, int], None] | None = None
        self._stale_groups: set[int] = set()

    def put(self, sample: RolloutSample, block: bool = True, timeout: float | None = None) -> None:
        sample.enqueued_at = time.time()
        super().put(sample, block, timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> RolloutSample:
        sample = super().get(block, timeout)
        if self.version_fn is not None:
            staleness = self.version_fn() - sample.model_version
            if staleness > self.max_staleness and sample.group_id not in self._stale_groups:
                self._stale_groups.add(sample.group_id)
                self.on_stale(sample, staleness)
        return sample


class TrlRolloutWorker(RolloutPipeline):
    """TRL's rollout-worker protocol on the pipeline. `policy` is `(TRL model_version, optimizer
    step of those weights)`: samples carry TRL's version of their dispatch (TRL's staleness counts
    in it); the journal's `policy_version` is the step."""

    def __init__(self, generate: Generate, *, num_generations: int, queue_maxsize: int = 0, poll_s: float = 0.005):
        super().__init__(generate, num_generations=num_generations, rollout_buffer=StaleObservingBuffer(queue_maxsize),
                         poll_s=poll_s)
        self.metrics_queue: queue.Queue = queue.Queue()
        self._step_fn: Callable[[], int] = lambda: 0

    def bind(self, trainer, on_stale: Callable[[RolloutSample, int], None]) -> None:
        """Read the trainer's config and state: in-flight groups from `max_inflight_tasks` (set
        by TRL's `__init__`), the step of each weight sync, TRL's staleness verdict."""
        args = trainer.args
        self.max_inflight_groups = max(1, args.max_inflight_tasks // self.num_generations)
        self._step_fn = lambda: trainer.state.global_step
        self.rollout_buffer.version_fn = lambda: trainer.model_version
        self.rollout_buffer.max_staleness = args.max_staleness
        self.rollout_buffer.on_stale = on_stale

    @property
    def model_version(self) -> int:
        return self.policy[0]

    def update_model_version(self, model_version: int) -> None:
        self.policy = (int(model_version), self._step_fn())

    def check_health(self, stale_after_s: float) -> None:
        self.check_running()

    def _tag(self, group: PromptGroup, samples: list[RolloutSample], policy: tuple[int, int]) -> None:
        if len(samples) != self.num_generations:
            raise GroupSplitAcrossSteps(
                f"the generator returned {len(samples)} samples for group {group.group_id} (dataset row "
                f"{group.idx}), but num_generations is {self.num_generations}: a group's samples must "
                "fill whole micro-batches for one optimizer step to train the whole group")
        for sample in samples:
            sample.group_id, sample.model_version = group.group_id, policy[0]


# -- a group's samples as data-plane rows ------------------------------------------------------------

_SAMPLE_FIELDS = ("prompt", "completion", "input_ids", "completion_mask", "old_log_probs")


def rows_of(samples: list[RolloutSample]) -> dict:
    """What the data plane stores of a generated group: every field TRL trains on, and TRL's
    `model_version` of its dispatch (the staleness of a restored group is TRL's to judge)."""
    return {"model_version": int(samples[0].model_version),
            "samples": [{**{f: getattr(s, f) for f in _SAMPLE_FIELDS}, "advantage": float(s.advantage),
                         "metrics": {k: float(v) for k, v in s.metrics.items()}} for s in samples]}


def samples_of(rows: dict, group_id: int) -> list[RolloutSample]:
    """The samples `rows_of` stored, as TRL's `RolloutSample`s of group `group_id`."""
    return [RolloutSample(prompt=s["prompt"], completion=s["completion"], input_ids=np.asarray(s["input_ids"]),
                          completion_mask=np.asarray(s["completion_mask"]),
                          old_log_probs=np.asarray(s["old_log_probs"]), advantage=s["advantage"],
                          model_version=rows["model_version"], group_id=group_id, metrics=s["metrics"])
            for s in rows["samples"]]


class JournaledRolloutWorker(TrlRolloutWorker):
    """The worker with every movement journaled through the session (`attach`ed by the trainer's
    `train()`): a prompt is admitted as it is dispatched; its samples are durable in the data
    plane and the group `finished` before the first sample is queued, so every sample TRL can
    train is in the journal's REPLAY."""

    session = None

    def attach(self, session) -> None:
        self.session = session

    def _restore(self) -> None:
        for work, rows in finished_groups(self.session):
            self._queue_restored(work, rows)
        self._groups = self._prompt_groups()

    def _queue_restored(self, work, rows: dict) -> None:
        self._queue(work.group_id, samples_of(rows, work.group_id))

    def _prompt_groups(self):
        for prompt in prompts(self.session):
            admit(self.session, prompt, self.policy[1])
            (item,) = prompt.batch
            yield PromptGroup(prompt.group_id, item["row"], item["idx"], prompt.epoch)

    def _next_group(self) -> PromptGroup:
        return next(self._groups)

    def _finished(self, group: PromptGroup, samples: list[RolloutSample]) -> None:
        finish(self.session, group.group_id, rows_of(samples), self.policy[1])
