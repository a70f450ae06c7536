"""verl's fully_async trainer with "trained" journaled at the optimizer step that consumed each
sample and its resume taken from the journal (through the rollouter, the journal's one writer).

- trained: `_fit_update_actor` returned (the step's optimizer updates are done): the batch's
  groups (from the uids the journaled rollouter set) are journaled `trained` at `global_steps`,
  before the step's checkpoint, if any, begins.
- the weights' step: announced to the rollouter before each weight sync, so what it generates
  next carries the step of the newest weights it may use.
- checkpoint: announced to the rollouter (step, param version), then verl's `_save_checkpoint`
  (actor files, the rollouter's `save_checkpoint`, which seals and commits).
- resume: the journal's committed step, never verl's folder name arithmetic (#7933) nor
  `latest_checkpointed_iteration.txt`; the folder is checked against its manifest before any
  file is loaded; folders above it are set aside in `uncommitted/`.
"""

from __future__ import annotations

import os
import re

import ray
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.trainer.ppo.utils import Role

from .checkpoint_folders import set_aside_uncommitted, verify_folder
from .verl_errors import CheckpointNotCommitted
from .verl_rollouter import STATE
from .verl_rows import group_of_uid

PlainTrainer = FullyAsyncTrainer.__ray_metadata__.modified_class.__mro__[1]
STEP_FOLDER = re.compile(r"^global_step_(\d+)$")   # verl's folder of param version N


def step_folder(root: str, param_version: int) -> str:
    return os.path.join(root, f"global_step_{param_version}")


class JournaledFullyAsyncTrainer(PlainTrainer):
    """verl's `FullyAsyncTrainer` (the plain class) with a `JournaledFullyAsyncRollouter`."""

    def _fit_update_actor(self, batch):
        batch = super()._fit_update_actor(batch)
        groups = sorted({group_of_uid(uid) for uid in batch.non_tensor_batch["uid"]})
        ray.get(self.rollouter.journal_trained.remote(groups, self.global_steps))
        return batch

    async def _fit_update_weights(self):
        if self.local_trigger_step == 1:   # verl syncs weights on this call
            await self.rollouter.journal_policy.remote(self.global_steps)
        return await super()._fit_update_weights()

    def _save_checkpoint(self):
        ray.get(self.rollouter.journal_expect_checkpoint.remote(self.global_steps, self.current_param_version))
        super()._save_checkpoint()

    async def load_checkpoint(self):
        step = await self.rollouter.journal_restore_point.remote()
        root = self.config.trainer.default_local_dir
        trigger = self.config.async_training.trigger_parameter_sync_step
        version = None if step is None else step // trigger
        set_aside_uncommitted(root, version, STEP_FOLDER)   # into root/uncommitted/
        if step is None:
            return 0
        folder = step_folder(root, version)
        if not os.path.isdir(folder):
            raise CheckpointNotCommitted(
                f"the journal committed the checkpoint of step {step}, but {folder} is gone: put it back (a "
                "committed checkpoint's folder must stay until a newer one is committed)")
        state = verify_folder(folder, STATE)
        if (state["global_steps"], state["param_version"]) != (step, version):
            raise CheckpointNotCommitted(
                f"{folder}/{STATE} says step {state['global_steps']} version {state['param_version']}, the journal "
                f"committed step {step} (version {version} with trigger_parameter_sync_step {trigger})")
        self.global_steps, self.current_param_version, self.last_ckpt_version = step, version, version
        self.actor_rollout_wg.load_checkpoint(os.path.join(folder, "actor"), del_local_after_load=False)
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(folder, str(Role.Critic)), del_local_after_load=False)
        return version
