"""What stands in for the GPU and the vLLM server when TRL's `AsyncGRPOTrainer` runs on a CPU.

FOR CPU TESTS ONLY: a run on GPUs with a vLLM server needs none of it. Everything TRL 1.16.0 takes
from a GPU or a server is replaced here, and nothing else (docs/trl.md, "On a CPU"):

- `apply_cpu_workarounds()`: TRL's packed "tree" attention fetches a FlashAttention-3 kernel from
  the Hub (replaced by `scaled_dot_product_attention`, `SdpaVarlen`), and its peak-FLOPs probe
  calls `torch.cuda.get_device_name` unconditionally (answered "unknown");
- `CPU_ARGS`: the `AsyncGRPOConfig` fields that would ask for CUDA or bf16;
- `LocalModelGenerator`: generation with a causal LM in the trainer's process, where TRL would
  call a vLLM server; `InProcessWeightTransfer`: the weight sync into that model, where TRL
  would stream weights to vLLM over NCCL.

TRL still builds a `VLLMClient` in `__init__` (never called with `token_budget=0` and an injected
worker and weight transfer), so `requests` must be installed.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM
from trl.experimental.async_grpo import async_grpo_trainer as trl_trainer_module
from trl.experimental.async_grpo import packing as trl_packing
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

# AsyncGRPOConfig fields for a CPU: no CUDA device, float32 (TRL's base config asks for bf16)
CPU_ARGS = {"use_cpu": True, "bf16": False, "dtype": "float32"}


class SdpaVarlen:
    """The FlashAttention-3 varlen kernel TRL's tree attention fetches, on `scaled_dot_product_attention`.

    Same contract as `flash_attn_varlen_func`: q (Nq, Hq, D); k, v (Nk, Hk, D) gathered along each
    segment's root-to-segment path; segment i attends q[cu_q[i]:cu_q[i+1]] to k[cu_k[i]:cu_k[i+1]]
    with the causal mask aligned bottom-right (a segment's last query sees its whole path)."""

    @staticmethod
    def flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=True,
                               window_size=(-1, -1), softcap=None):
        if not causal or tuple(window_size) != (-1, -1) or softcap:
            raise NotImplementedError("the CPU tree attention is causal, without sliding window or softcap")
        repeat = q.shape[1] // k.shape[1]
        outs = []
        cu_q, cu_k = cu_q.tolist(), cu_k.tolist()
        for i in range(len(cu_q) - 1):
            qi = q[cu_q[i]:cu_q[i + 1]].transpose(0, 1)
            ki = k[cu_k[i]:cu_k[i + 1]].repeat_interleave(repeat, dim=1).transpose(0, 1)
            vi = v[cu_k[i]:cu_k[i + 1]].repeat_interleave(repeat, dim=1).transpose(0, 1)
            lq, lk = qi.shape[1], ki.shape[1]
            mask = torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
            outs.append(F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=softmax_scale)
                        .transpose(0, 1))
        return torch.cat(outs, dim=0)


def apply_cpu_workarounds() -> None:
    """Patch the two places of TRL that need a GPU or the Hub (idempotent)."""
    # tree_attention looks `_flash_attn` up at call time, so replacing it sticks (registering another
    # attention function would not: every AsyncGRPOTrainer.__init__ registers TRL's again)
    trl_packing._flash_attn = lambda: SdpaVarlen
    # None is "peak FLOPs unknown": TRL turns the MFU metrics off and logs the rest
    trl_trainer_module.get_peak_flops_per_device = lambda accelerator, dtype: None


class LocalModelGenerator:
    """`generate(row, num_generations)` for the journaled trainer with a causal LM in this process:
    `row["prompt"]` (a string) tokenized, `max_new_tokens` sampled token by token at `temperature`,
    each sampled token's log-probability recorded (TRL's `old_log_probs`, aligned on `input_ids`),
    `reward(row, completion_ids)` per completion and TRL's group-relative advantage
    `(r - mean) / (std + 1e-8)`. Generation holds `lock`, which the weight transfer takes while it
    copies new weights in."""

    def __init__(self, model_dir: str, tokenizer, reward: Callable[[Any, list[int]], float], *,
                 max_new_tokens: int, temperature: float = 1.0, seed: int = 0):
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa", dtype=torch.float32)
        self.model.eval().requires_grad_(False)
        self.tokenizer, self.reward = tokenizer, reward
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.lock = threading.Lock()
        self.rng = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def _sample(self, prompt_ids: list[int], n: int) -> tuple[torch.Tensor, torch.Tensor]:
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        ids, logps = torch.tensor([prompt_ids] * n), torch.zeros(n, 0)
        done = torch.zeros(n, dtype=torch.bool)
        with self.lock:
            for _ in range(self.max_new_tokens):
                logprobs = torch.log_softmax(self.model(input_ids=ids).logits[:, -1, :].float() / self.temperature, -1)
                nxt = torch.multinomial(logprobs.exp(), 1, generator=self.rng).squeeze(1)
                nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                logps = torch.cat([logps, logprobs.gather(1, nxt[:, None])], dim=1)
                done |= nxt == eos
                if bool(done.all()):
                    break
        return ids[:, len(prompt_ids):], logps

    def __call__(self, row: Any, num_generations: int) -> list[RolloutSample]:
        prompt_ids = self.tokenizer(row["prompt"])["input_ids"]
        eos = self.tokenizer.eos_token_id
        generated, logps = self._sample(prompt_ids, num_generations)
        completions = []
        for r in range(num_generations):
            comp = generated[r].tolist()
            comp = comp[: comp.index(eos) + 1] if eos in comp else comp
            completions.append((comp, logps[r, : len(comp)].tolist()))
        rewards = np.asarray([self.reward(row, comp) for comp, _ in completions], dtype=float)
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        n_prompt = len(prompt_ids)
        return [RolloutSample(
            prompt=[{"role": "user", "content": row["prompt"]}],
            completion=[{"role": "assistant", "content": self.tokenizer.decode(comp)}],
            input_ids=np.asarray(prompt_ids + comp, dtype=np.int64),
            completion_mask=np.asarray([0] * n_prompt + [1] * len(comp), dtype=np.int64),
            old_log_probs=np.asarray([0.0] * n_prompt + lp, dtype=np.float32),
            advantage=float(adv), model_version=0, group_id=0,
            metrics={"reward": float(rew), "reward_std": float(rewards.std())})
            for (comp, lp), adv, rew in zip(completions, advantages, rewards, strict=True)]


class InProcessWeightTransfer:
    """TRL's `WeightTransferProtocol` into a `LocalModelGenerator`'s model: `pause` takes its lock
    (no generation sees half-copied weights), `send_weights` copies each `(name, tensor)` into the
    parameter of that name, `resume` releases the lock."""

    def __init__(self, generator: LocalModelGenerator):
        self.generator = generator
        self.params = dict(generator.model.named_parameters())

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        self.generator.lock.acquire()

    def send_weights(self, iterator) -> None:
        for name, tensor in iterator:
            self.params[name].data.copy_(tensor)

    def resume(self) -> None:
        self.generator.lock.release()

    def destroy(self) -> None:
        pass
