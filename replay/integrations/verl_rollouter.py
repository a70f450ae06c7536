"""verl's fully_async rollouter with every movement of a prompt journaled: the one writer of the
run's journal (the trainer reaches it through this actor's `journal_*` methods).

| movement | where verl makes it | journal |
| --- | --- | --- |
| taken | `_create_continuous_iterator` (the loader, one prompt per batch) | `take` |
| admitted | `_process_single_sample_streaming`, before generation | `admit` |
| finished | the agent loop manager's `generate_sequences_single` returned | `finish`, rows in the data plane, before the put |
| dropped | the message queue's overflow eviction (verl: a log line) | `discard`, the reason says so |
| trained | the trainer's `_fit_update_actor` (RPC `journal_trained`) | `trained` |
| checkpoint | `save_checkpoint`, after the trainer's actor files | `checkpoint`: begin, data.pt, folder sealed, commit |

A resume (`load_checkpoint`): `Session.open` restored the loader's position; finished samples
are put back on the message queue from the data plane; admitted (in flight) and taken prompts
are fed again first, then new prompts from the loader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import ray
from torch.utils.data import Dataset
from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
from verl.utils.dataset.rl_dataset import collate_fn

from .. import Session
from .checkpoint_folders import seal_folder
from .pipeline import Taken, admit, finish, finished_groups, prompts
from .verl_errors import CheckpointNotCommitted, UnsupportedVerlConfig, VerlInternalsChanged
from .verl_rows import group_of_uid, rows_of, sample_id_of, sample_of

PlainRollouter = FullyAsyncRollouter.__ray_metadata__.modified_class.__mro__[1]
STATE = "journal-verl-state.json"   # in each sealed folder: the trainer's step and param version
POSITION = "journal_position"        # the column the loader's batches carry: the dataset position


@dataclass
class JournalOptions:
    """Where the journal and the generated samples live: `Session.open(journal_dir,
    data_plane=..., **session_options)` in the rollouter's process."""

    journal_dir: str
    data_plane: Any
    session_options: dict = field(default_factory=dict)


def verl_feed_sample_id(epoch: int, feed_counter: int) -> str:
    """The sample id verl's `_feed_samples` gives the prompt it just pulled (private format)."""
    return f"sample_{epoch}_{feed_counter}"


class PositionedDataset(Dataset):
    """verl's train dataset with each item's position added (`POSITION`), so a batch names the
    dataset row the journal takes and a restore can read the prompt again."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int) -> dict:
        return {**self.dataset[idx], POSITION: idx}


def _positions(batch) -> list[tuple[int, None]]:
    return [(int(i), None) for i in batch[POSITION]]


class _FinishedBeforeQueued:
    """The rollouter's agent loop manager: `generate_sequences_single` returns only once the
    sample is journaled finished with its rows in the data plane (verl puts it on the message
    queue right after). Everything else is the manager's."""

    def __init__(self, manager, rollouter: "JournaledFullyAsyncRollouter"):
        self._manager, self._rollouter = manager, rollouter

    def __getattr__(self, name):
        return getattr(self._manager, name)

    async def generate_sequences_single(self, prompts):
        output = await self._manager.generate_sequences_single(prompts)
        self._rollouter._finished(prompts.non_tensor_batch["uid"][0], output)
        return output


class JournaledFullyAsyncRollouter(PlainRollouter):
    """verl's `FullyAsyncRollouter` (the plain class: make the actor with `ray.remote`) whose
    prompts are taken, admitted, finished and dropped through a `replay.Session`."""

    def __init__(self, config, tokenizer, processor=None, device_name=None, *, journal: JournalOptions):
        check_rollouter_config(config)
        super().__init__(config, tokenizer, processor, device_name)
        self.journal_options = journal
        self.session: Session | None = None
        self._taken: dict[str, Taken] = {}     # verl's feed sample id -> the prompt, until admitted
        self._epoch_of: dict[int, int] = {}
        self._policy_step = 0                   # trainer step of the weights generating now
        self._checkpoint: tuple[int, int] | None = None

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler):
        super()._create_dataloader(PositionedDataset(train_dataset), val_dataset, collate_fn, train_sampler)

    # -- the journal ------------------------------------------------------------------------------

    def _open_session(self) -> Session:
        if self.session is None:
            o = self.journal_options
            self.session = Session.open(o.journal_dir, dataset=self.train_dataloader.dataset,
                                        loader=self.train_dataloader, collate_fn=collate_fn, key=_positions,
                                        data_plane=o.data_plane, **o.session_options)
        return self.session

    def journal_restore_point(self) -> int | None:
        """The trainer step of the journal's committed checkpoint (None: a first start)."""
        return self._open_session().step

    def journal_policy(self, step: int) -> None:
        """The trainer is about to push the weights of `step` to the rollout replicas."""
        self._policy_step = step

    def journal_trained(self, group_ids: list[int], step: int) -> None:
        self.session.trained(group_ids, step=step)

    def journal_expect_checkpoint(self, step: int, param_version: int) -> None:
        """The trainer saves step `step` (verl's folder `global_step_{param_version}`) next."""
        self._checkpoint = (step, param_version)

    def journal_close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()

    # -- verl's movements -----------------------------------------------------------------------

    def _create_continuous_iterator(self):
        for prompt in prompts(self._open_session(), self.config.trainer.total_epochs):
            yield self._feed(prompt)

    def _feed(self, prompt: Taken) -> tuple[int, Any]:
        # verl names the sample from its feed counter right after this yield returns
        self._taken[verl_feed_sample_id(prompt.epoch, self.global_steps)] = prompt
        self._epoch_of[prompt.group_id] = prompt.epoch
        return prompt.epoch, prompt.batch

    async def _process_single_sample_streaming(self, rollout_sample):
        prompt = self._taken.pop(rollout_sample.sample_id, None)
        if prompt is None:
            raise VerlInternalsChanged(
                f"the rollouter processes sample {rollout_sample.sample_id!r}, which its feed never named "
                f"(expected one of {sorted(self._taken)[:5]}): verl's _feed_samples names samples differently now")
        rollout_sample.sample_id = sample_id_of(prompt.group_id)
        admit(self.session, prompt, self._policy_step)
        await super()._process_single_sample_streaming(rollout_sample)

    def _finished(self, uid: str, output) -> None:
        gid = group_of_uid(uid)
        finish(self.session, gid, rows_of(output, self._epoch_of.pop(gid), self._policy_step), self._policy_step)

    def _evicted(self, sample_id: str) -> None:
        gid = group_of_uid("uid_" + sample_id)
        self.session.discard([gid], reason=(
            f"evicted: verl's message queue was full ({self.max_queue_size} samples) and dropped its oldest "
            f"sample, {sample_id}, to take a newer one"))

    async def set_message_queue_client(self, message_queue_client):
        if not hasattr(message_queue_client, "on_evicted"):
            raise UnsupportedVerlConfig(
                f"the message queue client is a {type(message_queue_client).__name__}: use "
                "replay.integrations.verl_queue.ReportingQueueClient over a ReportingMessageQueue actor, "
                "or the queue's overflow evictions are lost without a record")
        message_queue_client.on_evicted = self._evicted
        await super().set_message_queue_client(message_queue_client)

    async def fit(self):
        if not isinstance(self.async_rollout_manager, _FinishedBeforeQueued):
            self.async_rollout_manager = _FinishedBeforeQueued(self.async_rollout_manager, self)
        await super().fit()

    # -- checkpoint and resume ----------------------------------------------------------------------

    async def save_checkpoint(self, local_global_step_folder: str):
        """verl's data.pt, then the folder (the trainer's actor files are in it already) sealed
        and the journal's checkpoint committed."""
        if self._checkpoint is None or os.path.basename(os.path.normpath(local_global_step_folder)) != \
                f"global_step_{self._checkpoint[1]}":
            raise CheckpointNotCommitted(
                f"verl saves {local_global_step_folder}, but the trainer announced {self._checkpoint} (step, "
                "param version): use JournaledFullyAsyncTrainer, which announces each save")
        step, version = self._checkpoint
        await super().save_checkpoint(local_global_step_folder)
        self.session.checkpoint(step, save=lambda: seal_folder(
            local_global_step_folder, {"global_steps": step, "param_version": version}, STATE))
        self._checkpoint = None

    async def load_checkpoint(self):
        """The loader's position is the journal's (restored by `Session.open`; verl's data.pt is
        not read); samples finished before the crash go back on the message queue."""
        s = self._open_session()
        for work, rows in finished_groups(s):
            await self.message_queue_client.put_sample(sample=ray.cloudpickle.dumps(sample_of(rows, work.group_id)))
        return s.step or 0


def check_rollouter_config(config) -> None:
    """The config fields the journaled rollouter needs, each refused with the value to use."""
    trainer = config.trainer
    if trainer.resume_mode != "auto":
        raise UnsupportedVerlConfig(
            f"trainer.resume_mode is {trainer.resume_mode!r}: set 'auto' (the journal decides what a start resumes)")
    if trainer.default_hdfs_dir is not None:
        raise UnsupportedVerlConfig(
            f"trainer.default_hdfs_dir is {trainer.default_hdfs_dir!r}: set null (the journal commits a checkpoint "
            "once its local files are durable)")
    if trainer.get("remove_previous_ckpt_in_save") or trainer.get("max_actor_ckpt_to_keep") == 1:
        raise UnsupportedVerlConfig(
            "trainer.max_actor_ckpt_to_keep is 1 (or remove_previous_ckpt_in_save): keep at least 2, or the "
            "committed checkpoint's actor files go before the next checkpoint is committed")
