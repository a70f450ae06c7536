"""Token-by-token generation of the example trainer's rollouts, continued from a durable prefix.

A rollout is `rollout_length(...)` policy tokens (long-tailed: log-normal, capped), each one
real forward pass of the tiny policy (`TinyPolicy.next_logits`). A multi-turn rollout (a
prompt with an environment, `examples.environments`) ends a turn every TURN_TOKENS tokens:
the turn's last token is its action and the environment's observation joins the trace. The
token at position p is sampled (Gumbel-max) with the noise of row key + p of a table drawn
once from a fixed seed, so a rollout continued from its prefix with the same weights
generates exactly the tokens the uninterrupted one would have.

    r = Rollout.start(policy, tokens, prompt_id, key, length, env)      # or Rollout.resumed(..., row)
    while not r.done:
        r.advance(n)                      # n tokens at most; r.us += their generation time
        row = r.progress_row(version)     # the durable prefix: trace, tokens, us, environment
"""

from __future__ import annotations

import hashlib
import random

import torch

from replay.environments import Environment, resume, saved_state

from .dataset import VOCAB

LENGTH_MEDIAN = 4      # policy tokens of a median rollout
LENGTH_SIGMA = 1.1     # log-normal spread of the lengths: a long tail
MAX_TOKENS = 64        # 16x the median: the longest rollouts still make the deadline
TURN_TOKENS = 8        # policy tokens per turn of a multi-turn rollout
BOS = 0                # what the first token is sampled after (single-turn)
NOISE_ROWS = 8191      # rows of the Gumbel noise table
_noise: torch.Tensor | None = None


def _gumbel(row: int) -> torch.Tensor:
    """Row `row` (mod NOISE_ROWS) of the Gumbel noise table, the same in every process."""
    global _noise
    if _noise is None:
        u = torch.rand(NOISE_ROWS, VOCAB, generator=torch.Generator().manual_seed(20261202))
        _noise = -torch.log(-torch.log(u.clamp_min(1e-12)))
    return _noise[row % NOISE_ROWS]


def _seeded(*parts) -> random.Random:
    return random.Random("-".join(str(p) for p in parts))


def rollout_length(seed: int, epoch: int, idx: int, index: int) -> int:
    """Policy tokens of rollout `index` of the prompt at `idx` in `epoch`: the same in every
    attempt and every process."""
    x = LENGTH_MEDIAN * _seeded("length", seed, epoch, idx, index).lognormvariate(0.0, LENGTH_SIGMA)
    return max(1, min(MAX_TOKENS, round(x)))


def rollout_key(seed: int, epoch: int, idx: int, index: int) -> int:
    """The sampling key of that rollout's tokens (position p samples with noise row key + p)."""
    digest = hashlib.blake2b(f"tokens-{seed}-{epoch}-{idx}-{index}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


class Rollout:
    """One rollout being generated: the trace so far (policy tokens and observations), the
    policy tokens generated, the turns' actions, the answer logits the prompt's prefill gave,
    `us`, the generation microseconds of the trace over every attempt and process that made
    it, and whether the process generating it has `settled` its account (delivered, failed or
    given up: not in flight at a kill)."""

    __slots__ = ("policy", "base", "answer_logits", "key", "length", "env", "trace", "generated", "actions", "us",
                 "settled")

    def __init__(self, policy, tokens: torch.Tensor, key: int, length: int, env: Environment | None):
        self.policy, self.key, self.length, self.env = policy, key, length, env
        with torch.no_grad():
            self.base, self.answer_logits = policy.prefill(tokens)
        self.trace: list[int] = []
        self.generated = 0
        self.actions: list[int] = []
        self.us = 0
        self.settled = False

    @classmethod
    def start(cls, policy, tokens, prompt_id: int, key: int, length: int, env: Environment | None) -> "Rollout":
        r = cls(policy, tokens, key, length, env)
        if env is not None:
            r.trace.append(int(env.reset(prompt_id)) % VOCAB)
        return r

    @classmethod
    def resumed(cls, policy, tokens, prompt_id: int, key: int, length: int, env: Environment | None,
                row: dict) -> "Rollout":
        """The rollout whose durable prefix is `row` (`progress_row`), its environment brought
        back to the turn the prefix reached (`replay.environments.resume`)."""
        r = cls(policy, tokens, key, length, env)
        r.trace, r.generated, r.us = row["trace"].tolist(), int(row["generated"]), int(row["us"])
        if env is not None:
            resume(env, prompt_id, row["env"])
            r.actions = list(row["env"]["actions"])
        return r

    @property
    def done(self) -> bool:
        return self.generated >= self.length

    @property
    def turn(self) -> int | None:
        """Turns completed (None: single-turn)."""
        return None if self.env is None else len(self.actions)

    def advance(self, n: int) -> int:
        """Generate up to `n` policy tokens (one forward pass each); returns how many."""
        k = min(n, self.length - self.generated)
        with torch.no_grad():
            for _ in range(k):
                logits = self.policy.next_logits(self.base, self.trace[-1] if self.trace else BOS)
                tok = int(torch.argmax(logits + _gumbel(self.key + self.generated)))
                self.trace.append(tok)
                self.generated += 1
                if self.env is not None and self.generated % TURN_TOKENS == 0:
                    self.actions.append(tok)
                    self.trace.append(int(self.env.step(tok)) % VOCAB)
        return k

    def stops(self, every: int) -> bool:
        """Whether a progress row is due here: at a turn's end (multi-turn) or every `every`
        tokens (single-turn); never with `every` 0 or once done."""
        if not every or self.done or not self.generated:
            return False
        return self.generated % (TURN_TOKENS if self.env is not None else every) == 0

    def next_stop(self, every: int) -> int:
        """Policy tokens to the next progress point (or the end)."""
        if not every:
            return self.length - self.generated
        step = TURN_TOKENS if self.env is not None else every
        return min(step - self.generated % step, self.length - self.generated)

    def progress_row(self, policy_version: int) -> dict:
        """The durable prefix: what `resumed` continues from."""
        row = {"trace": torch.tensor(self.trace, dtype=torch.long), "generated": self.generated,
               "us": self.us, "policy_version": policy_version}
        if self.env is not None:
            row["env"] = saved_state(self.env, self.actions)
        return row
