"""TRL's `AsyncGRPOTrainer` (TRL 1.16.0) with an ownership journal: no prompt group lost, none
trained twice, across `kill -9` and `resume_from_checkpoint` (docs/trl.md).

    trainer = JournaledAsyncGRPOTrainer(model="...", args=AsyncGRPOConfig(..., token_budget=0, max_steps=N),
                                        train_dataset=ds, generate=my_generate,
                                        journal_dir="run/journal", data_plane=LocalDataPlane("run/rows"))
    trainer.train(resume_from_checkpoint=True)   # the same call on a first start and after any crash

Where each movement of a group is journaled, and by whom:

| movement | where TRL makes it | journal |
| --- | --- | --- |
| taken, admitted | the rollout worker (`JournaledRolloutWorker`, trl_worker.py, on pipeline.py) | `take`, `admit` |
| scored and queued | the worker, before its first `rollout_buffer.put` | `finish` with the samples in the data plane |
| dropped as stale | `RolloutQueueDataset.__iter__` (seen at the buffer's `get`) | `discard`, the staleness in the reason |
| trained | the optimizer step that consumed it (`on_step_end`), not the collation | `trained` |
| checkpoint | `_save_checkpoint` | `checkpoint`: commits once TRL's files are durable |
| resume | `train()` | `Session.open`: the committed checkpoint's folder, the loader position; TRL's `max_staleness` as the restore's `max_policy_lag` (`policy_lag`) |

Importing this module imports TRL and checks its version (`UnsupportedTrlVersion`); `import
replay` never imports TRL.
"""

from __future__ import annotations

import collections
import os
import re
from typing import Any

import trl

from .trl_errors import (CheckpointNotCommitted, GroupSplitAcrossSteps, TrlIntegrationError, UnsupportedTrlConfig,
                         UnsupportedTrlVersion)

SUPPORTED_TRL = "1.16.0"


def check_trl_version(version: str) -> None:
    if version != SUPPORTED_TRL:
        raise UnsupportedTrlVersion(
            f"TRL {version} is installed; replay.integrations.trl is built and tested on TRL {SUPPORTED_TRL} (it "
            "subclasses TRL's experimental AsyncGRPOTrainer and relies on its private names, listed in docs/trl.md): "
            f"install 'ownership-journal[trl]' (trl=={SUPPORTED_TRL}), or check those names in {version} first")


check_trl_version(trl.__version__)

from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from transformers.trainer_utils import rotate_checkpoints  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOTrainer  # noqa: E402

from .. import Session  # noqa: E402
from .checkpoint_folders import seal_folder, set_aside_uncommitted, verify_folder  # noqa: E402
from .pipeline import Generate  # noqa: E402
from .trl_worker import JournaledRolloutWorker  # noqa: E402

__all__ = ["JournaledAsyncGRPOTrainer", "JournaledRolloutWorker", "TrainedAtOptimizerStep", "check_config", "policy_lag",
           "check_trl_version", "SUPPORTED_TRL", "TrlIntegrationError", "UnsupportedTrlVersion",
           "UnsupportedTrlConfig", "GroupSplitAcrossSteps", "CheckpointNotCommitted"]

STATE = "journal-trl-state.json"                  # in each sealed folder: TRL's model_version and the step
CHECKPOINT_FOLDER = re.compile(r"^checkpoint-(\d+)$")   # transformers' PREFIX_CHECKPOINT_DIR-{step}


def checkpoint_folder(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"checkpoint-{step}")


class CollationLog(set):
    """TRL's `_trained_groups`, which its collator updates once per micro-batch (by reference).

    Still the set TRL reads (`batch/groups_per_step`); it also keeps each micro-batch's
    `{group id: samples}` in collation order, which is training order: the dataloader reads ahead
    (accelerate's dispatcher fetches batch k+1 before yielding k; `get_batch_samples` fetches a
    step's micro-batches before the first forward) but never reorders."""

    def __init__(self):
        super().__init__()
        self.microbatches: collections.deque[dict[int, int]] = collections.deque()

    def update(self, group_ids) -> None:
        counts = dict(collections.Counter(group_ids))
        self.microbatches.append(counts)
        super().update(counts)


class _OptimizerStepEnd(TrainerCallback):
    def __init__(self, trainer: "TrainedAtOptimizerStep"):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._optimizer_step_done(state.global_step)


class TrainedAtOptimizerStep:
    """Mixin for an `AsyncGRPOTrainer`: the groups each optimizer step trained, known when the step
    completed (`_groups_trained(step, {group id: samples})`), not when they were collated.

    `training_step` runs once per micro-batch, in order, so it pops the oldest collated one; the
    callback's `on_step_end` runs after `optimizer.step()` and `global_step += 1`, and before the
    checkpoint of the same step is saved."""

    def _count_groups_per_step(self) -> None:
        self._trained_groups = CollationLog()
        self._step_groups: dict[int, int] = {}
        self.add_callback(_OptimizerStepEnd(self))

    def training_step(self, model, inputs, num_items_in_batch=None):
        for gid, n in self._trained_groups.microbatches.popleft().items():
            self._step_groups[gid] = self._step_groups.get(gid, 0) + n
        return super().training_step(model, inputs, num_items_in_batch)

    def _optimizer_step_done(self, step: int) -> None:
        groups, self._step_groups = self._step_groups, {}
        self._groups_trained(step, groups)

    def _groups_trained(self, step: int, groups: dict[int, int]) -> None:
        raise NotImplementedError


def policy_lag(args, session_options: dict) -> int:
    """The restore's `max_policy_lag` (DESIGN 14), in optimizer steps: TRL's own bound,
    `max_staleness` weight syncs of `weight_sync_steps` steps each (the journal's
    `policy_version` is the optimizer step of the weights, TRL's `model_version` counts syncs). A
    `max_policy_lag` in `session_options` must say the same."""
    lag = args.max_staleness * args.weight_sync_steps
    given = session_options.get("max_policy_lag", lag)
    if given != lag:
        raise UnsupportedTrlConfig(
            f"session_options max_policy_lag={given}, but TRL trains samples up to max_staleness "
            f"{args.max_staleness} x weight_sync_steps {args.weight_sync_steps} = {lag} steps old: leave "
            "max_policy_lag out (the trainer passes TRL's bound), or change max_staleness")
    return lag


def check_config(args) -> None:
    """The config fields "trained at step S" needs, each refused with the value to use."""
    if args.max_steps is None or args.max_steps <= 0:
        raise UnsupportedTrlConfig(
            f"max_steps is {args.max_steps}: set max_steps > 0 (TRL's epoch-driven stop counts the groups "
            "its own worker restores, which the journaled worker does not)")
    if args.token_budget is None or args.token_budget > 0:
        raise UnsupportedTrlConfig(
            f"token_budget is {args.token_budget}: set token_budget=0 (a token-budgeted micro-batch can split a "
            "group across optimizer steps; 0 batches a fixed per_device_train_batch_size samples)")
    if args.per_device_train_batch_size % args.num_generations:
        raise UnsupportedTrlConfig(
            f"per_device_train_batch_size {args.per_device_train_batch_size} is not a multiple of "
            f"num_generations {args.num_generations}: a micro-batch must hold whole groups")
    if args.world_size != 1:
        raise UnsupportedTrlConfig(
            f"world_size is {args.world_size}: the journaled trainer runs on one process (the commit of a "
            "checkpoint would have to wait for every rank's files)")


class _IndexedRows:
    """The train dataset as the session sees it: item i is `{"idx": i, "row": dataset[i]}` (the
    session reads the idx and fingerprints the item; the generator gets the row)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int) -> dict:
        return {"idx": idx, "row": self.dataset[idx]}


class JournaledAsyncGRPOTrainer(TrainedAtOptimizerStep, AsyncGRPOTrainer):
    """`AsyncGRPOTrainer` whose rollout worker and checkpoints go through a `replay.Session`.

    `generate(row, num_generations)` generates and scores one group (the dataset row as given,
    `num_generations` `RolloutSample`s with their advantages), or returns a
    `concurrent.futures.Future` of them; the worker sets each sample's `group_id` and
    `model_version`. `journal_dir`, `data_plane` and `session_options` (more `Session.open`
    arguments) are the session's; its `max_policy_lag` is TRL's `max_staleness` in steps
    (`policy_lag`): a restore keeps the finished groups of weights up to that many steps newer
    than its checkpoint, which TRL trains as any sample that old. `train(resume_from_checkpoint=...)`
    resumes from the journal's committed checkpoint, whatever the argument says (a path naming
    another folder raises)."""

    worker_class = JournaledRolloutWorker

    def __init__(self, model: str, *, args, train_dataset, generate: Generate, journal_dir: str, data_plane,
                 session_options: dict | None = None, **kwargs: Any):
        check_config(args)
        for name, owner in (("rollout_worker", "the journaled trainer's own (built from generate=)"),
                            ("reward_funcs", "not called: generate= scores its groups")):
            if kwargs.get(name) is not None:
                raise UnsupportedTrlConfig(f"{name}= is {owner}")
        self.journal_dir, self.data_plane = journal_dir, data_plane
        self.session_options = {**(session_options or {}),
                                "max_policy_lag": policy_lag(args, dict(session_options or {}))}
        self.session: Session | None = None
        worker = self.worker_class(generate, num_generations=args.num_generations, queue_maxsize=args.queue_maxsize)
        super().__init__(model, args=args, train_dataset=train_dataset, rollout_worker=worker, **kwargs)
        self._count_groups_per_step()
        worker.bind(self, self._discard_stale)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        rows = _IndexedRows(self.train_dataset)
        self.session = Session.open(self.journal_dir, dataset=rows, collate_fn=list, data_plane=self.data_plane,
                                    loader=StatefulDataLoader(rows, batch_size=1, collate_fn=list),
                                    **self.session_options)
        try:
            checkpoint = self._resume_point(resume_from_checkpoint)
            self.rollout_worker.attach(self.session)
            return super().train(resume_from_checkpoint=checkpoint, trial=trial, **kwargs)
        finally:
            session, self.session = self.session, None
            session.close()

    def _resume_point(self, requested) -> str | None:
        """The committed checkpoint's folder (None on a first start), its files verified, TRL's
        `model_version` restored (TRL restores it only for its own worker: without it, groups in the
        journal would carry versions above the trainer's); uncommitted checkpoints' folders set aside."""
        step = self.session.step
        committed = None if step is None else checkpoint_folder(self.args.output_dir, step)
        if isinstance(requested, (str, os.PathLike)) and (
                committed is None or os.path.abspath(requested) != os.path.abspath(committed)):
            raise CheckpointNotCommitted(
                f"resume_from_checkpoint={str(requested)!r}, but journal {self.journal_dir} restores "
                f"{committed or 'a first start (no committed checkpoint)'}: pass True (the journal decides)")
        set_aside_uncommitted(self.args.output_dir, step, CHECKPOINT_FOLDER)
        if committed is None:
            return None
        if not os.path.isdir(committed):
            raise CheckpointNotCommitted(
                f"journal {self.journal_dir} committed the checkpoint of step {step}, but {committed} is gone: "
                "put it back (a committed checkpoint's folder must stay until a newer one is committed)")
        # the train-begin weight sync adds one: the resumed weights are the checkpoint's, so is their version
        self.model_version = verify_folder(committed, STATE)["model_version"] - 1
        return committed

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = self._get_output_dir(trial=trial)
        step = self.state.global_step
        folder = checkpoint_folder(run_dir, step)
        self.session.checkpoint(step, save=lambda: self._write_checkpoint(model, trial, folder))
        # older folders go only once a newer checkpoint is committed
        rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit,
                           best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)

    def _write_checkpoint(self, model, trial, folder: str) -> None:
        """TRL's and transformers' files, then the folder sealed (the journal's `save`)."""
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        seal_folder(folder, {"step": self.state.global_step, "model_version": self.model_version}, STATE)

    def _groups_trained(self, step: int, groups: dict[int, int]) -> None:
        queued = self.rollout_worker.samples_queued
        for gid, n in groups.items():
            expected = queued.pop(gid, None)
            if n != expected:
                raise GroupSplitAcrossSteps(
                    f"optimizer step {step} trained {n} samples of group {gid}, whose worker queued {expected}: "
                    f"per_device_train_batch_size ({self.args.per_device_train_batch_size}) must be a multiple "
                    f"of num_generations ({self.args.num_generations}), with token_budget=0")
        self.session.trained(sorted(groups), step=step)

    def _discard_stale(self, sample, staleness: int) -> None:
        self.rollout_worker.samples_queued.pop(sample.group_id, None)
        self.session.discard([sample.group_id], reason=(
            f"stale: staleness {staleness} > max_staleness {self.args.max_staleness} (generated by policy "
            f"v{sample.model_version}, trainer at v{self.model_version})"))
