"""What stands in for the GPU when verl's fully_async loop runs on a CPU (tests only).

verl's own code runs: the rollouter (`_feed_samples`, `_processor_worker`, its pending queue and
tasks, the staleness pause, `save_checkpoint`/`load_checkpoint`), the message queue actor, the
trainer (`fit`, `fit_step`, `_get_samples_from_queue`, `assemble_batch_from_rollout_samples`,
GRPO advantages, `_update_actor`, the weight-sync and checkpoint calls) and its config. Replaced:

| verl's piece | on a GPU | here |
| --- | --- | --- |
| rollout replicas + agent loop manager | vLLM/SGLang servers | `TinyGeneration`: a tiny policy sampled in the rollouter's process |
| actor worker group | FSDP/Megatron workers | `TinyActorGroup`: the same policy, a real PPO-clip loss and `optimizer.step()` |
| checkpoint engine (weight sync) | NCCL broadcast | `PushWeights`: the state dict sent to the rollouter actor |
| dataset | parquet + tokenizer | `tests/support/verl_data.py` (`data.custom_cls`) |
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.utils import tensordict_utils as tu

from tests.support.verl_data import EQ, VOCAB

RESPONSE_LEN = 2
HIDDEN = 16


class TinyPolicy(torch.nn.Module):
    """Next-token logits from the prompt's two digits and the previous token."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, digits: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(digits).sum(-2) + self.embed(previous)))

    def response_log_probs(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        previous = torch.cat([prompts[:, -1:], responses[:, :-1]], dim=1)
        digits = prompts[:, :2].unsqueeze(1).expand(-1, responses.shape[1], -1)
        logits = self(digits, previous)
        return torch.log_softmax(logits, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def reward(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """1.0 when the first response token is (a + b) % 10."""
    return (responses[:, 0] == (prompts[:, 0] + prompts[:, 1]) % 10).float()


class TinyGeneration:
    """The agent loop manager's `generate_sequences_single`: the n rows of one prompt sampled
    from the rollouter's copy of the policy (after `delay_s`, a stand-in for generation time),
    with the fields verl's trainer reads."""

    def __init__(self, delay_s: float, seed: int):
        self.policy, self.version, self.delay_s = TinyPolicy(), 0, delay_s
        self.generator = torch.Generator().manual_seed(seed)

    async def generate_sequences_single(self, prompts: DataProto) -> DataProto:
        start = time.time()
        await asyncio.sleep(self.delay_s)
        version = self.version
        ids = prompts.batch["input_ids"]
        n = ids.shape[0]
        responses = torch.empty(n, 0, dtype=torch.long)
        with torch.no_grad():
            for _ in range(RESPONSE_LEN):
                previous = torch.cat([ids[:, -1:], responses], 1)[:, -1]
                probs = torch.softmax(self.policy(ids[:, :2], previous), -1)
                responses = torch.cat([responses, torch.multinomial(probs, 1, generator=self.generator)], 1)
            log_probs = self.policy.response_log_probs(ids, responses)
        scores = torch.zeros(n, RESPONSE_LEN)
        scores[:, -1] = reward(ids, responses)
        full = torch.cat([ids, responses], 1)
        elapsed = time.time() - start
        versions = np.array([version] * n, dtype=object)
        return DataProto.from_dict(
            tensors={"prompts": ids, "responses": responses, "response_mask": torch.ones(n, RESPONSE_LEN, dtype=torch.long),
                     "input_ids": full, "attention_mask": torch.ones_like(full),
                     "position_ids": torch.arange(full.shape[1]).expand(n, -1).clone(),
                     "rollout_log_probs": log_probs, "rm_scores": scores},
            non_tensors={"min_global_steps": versions, "max_global_steps": versions.copy()},
            meta_info={"metrics": [{"generate_sequences": elapsed, "tool_calls": 0.0}] * n})


class _OneReplica:
    """The rollouter's server manager, as far as the fully_async loop asks."""

    def get_active_server_count(self) -> int:
        return 1

    def get_replicas(self) -> list:
        return []


class CpuRollouter:
    """Mixin for a rollouter class: `init_workers` builds the stand-in generation instead of
    rollout replicas, reward and teacher managers; `load_policy` receives synced weights."""

    generation_delay_s = 0.0

    async def init_workers(self):
        self._init_async_objects()
        self.async_rollout_manager = TinyGeneration(self.generation_delay_s, seed=os.getpid())
        self.llm_server_manager = _OneReplica()

    def load_policy(self, state: dict, version: int) -> None:
        generation = getattr(self.async_rollout_manager, "_manager", self.async_rollout_manager)
        generation.policy.load_state_dict(state)
        generation.version = version


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class TinyActorGroup:
    """The actor worker group: `update_actor` (verl's no-padding TensorDict in, metrics out)
    runs PPO-clip on the tiny policy and one `optimizer.step()`; checkpoints are a torch file
    and its sha256, checked before `torch.load(weights_only=True)`."""

    FILE = "tiny_actor.pt"

    def __init__(self, learning_rate: float = 0.05, clip: float = 0.2, delay_s: float = 0.0):
        self.policy, self.delay_s = TinyPolicy(), delay_s
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=learning_rate)
        self.clip = clip

    def update_actor(self, data: TensorDict) -> TensorDict:
        n_resp = tu.get(data, "max_response_len")
        ids = torch.stack([row for row in data["input_ids"].unbind()])
        prompts, responses = ids[:, :-n_resp], ids[:, -n_resp:]
        old = data["old_log_probs"]
        advantages = data["advantages"]
        ratio = torch.exp(self.policy.response_log_probs(prompts, responses) - old)
        loss = -torch.min(ratio * advantages, ratio.clamp(1 - self.clip, 1 + self.clip) * advantages).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        time.sleep(self.delay_s)   # a stand-in for training time
        out = TensorDict({}, batch_size=[])
        tu.assign_non_tensor_data(out, "metrics", {"pg_loss": float(loss), "mfu": 0.0})
        return out

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        path = os.path.join(local_path, self.FILE)
        torch.save({"model": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}, path)
        with open(path + ".sha256", "w") as f:
            f.write(_sha256(path))

    def load_checkpoint(self, local_path, del_local_after_load=False):
        path = os.path.join(local_path, self.FILE)
        with open(path + ".sha256") as f:
            if f.read() != _sha256(path):
                raise RuntimeError(f"{path}: sha256 differs from {path}.sha256; not loaded")
        state = torch.load(path, weights_only=True)
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


class PushWeights:
    """The checkpoint engine manager: `update_weights` sends the actor's weights to the rollouter."""

    def __init__(self, trainer):
        self.trainer = trainer

    async def update_weights(self, global_steps: int):
        state = {k: v.detach().clone() for k, v in self.trainer.actor_wg.policy.state_dict().items()}
        await self.trainer.rollouter.load_policy.remote(state, global_steps)


class OneDevice:
    """The trainer's resource pool manager, as far as the metrics ask."""

    def get_n_gpus(self) -> int:
        return 1


class CpuTrainer:
    """Mixin for a trainer class: the tiny actor group (`training_delay_s` after each step) and
    the weight push."""

    training_delay_s = 0.0

    async def init_workers(self):
        self.actor_wg = self.actor_rollout_wg = TinyActorGroup(delay_s=self.training_delay_s)

    async def _setup_checkpoint_manager(self):
        self.checkpoint_manager = PushWeights(self)

    async def _setup_hybrid_checkpoint_manager(self):
        self.hybrid_checkpoint_manager = None
