"""A deterministic prompt dataset with two tasks, and the one collate function the trainer uses.

Every row is a plain dict (`idx`, `task_name`, `prompt`, `tokens`, `answer`), the same
in every process for the same `(size, seed)`, so `replay.restore` can rebuild a prompt
from its `idx` and check it against the fingerprint the journal recorded.

    ds = PromptDataset(2048, seed=0)
    ds[41] -> {"idx": 41, "task_name": "logic", "prompt": "is 9 greater than 4?", ...}
    collate_fn([ds[41], ds[7]]) -> {"idx": tensor([41, 7]), "tokens": tensor(2 x 6), ...}
"""

from __future__ import annotations

import random
from typing import Any

import torch

TASKS = ("math", "logic")
VOCAB = 64          # prompt token ids
ANSWERS = 16        # answer token ids (the policy's action space)
PROMPT_TOKENS = 6
_TASK_TOKEN = {"math": 1, "logic": 2}
_OPERAND_BASE = 16  # operand tokens are 16..47


class PromptDataset(torch.utils.data.Dataset):
    """`size` rows, deterministic in `seed`. Task "math": (a + b) mod 16; task "logic": a > b."""

    def __init__(self, size: int = 2048, seed: int = 0):
        if size < 1:
            raise ValueError(f"size must be positive, not {size}")
        rng = random.Random(f"ownership-journal-dataset-{seed}")
        self._rows = []
        for idx in range(size):
            task = TASKS[rng.randrange(2)]
            a, b = rng.randrange(16), rng.randrange(16)
            if task == "math":
                prompt, answer = f"what is {a} + {b} mod 16?", (a + b) % 16
            else:
                prompt, answer = f"is {a} greater than {b}?", int(a > b)
            tokens = [_TASK_TOKEN[task], _OPERAND_BASE + a, _OPERAND_BASE + b] + [0] * (PROMPT_TOKENS - 3)
            self._rows.append((idx, task, prompt, tuple(tokens), answer))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        if not isinstance(idx, int) or isinstance(idx, bool):
            idx = int(idx)
        if idx < 0:
            raise IndexError(idx)
        i, task, prompt, tokens, answer = self._rows[idx]
        return {"idx": i, "task_name": task, "prompt": prompt, "tokens": list(tokens), "answer": answer}


def collate_fn(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows -> one batch. Used by the dataloader and, with one row, by `replay.restore`."""
    return {
        "idx": torch.tensor([r["idx"] for r in rows], dtype=torch.long),
        "task_name": [r["task_name"] for r in rows],
        "prompt": [r["prompt"] for r in rows],
        "tokens": torch.tensor([r["tokens"] for r in rows], dtype=torch.long),
        "answer": torch.tensor([r["answer"] for r in rows], dtype=torch.long),
    }
