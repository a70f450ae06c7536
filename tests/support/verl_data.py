"""The prompts of the verl tests, as verl's `data.custom_cls` (loaded by verl from
`pkg://tests.support.verl_data`): "a b =" as token ids, `index` its position. The size comes from
`data.train_files`, written `arith-<size>` (nothing is read from disk)."""

from __future__ import annotations

import random

import torch
from torch.utils.data import Dataset

EQ = 10          # the "=" token; digits are 0-9
VOCAB = 11


class ArithPrompts(Dataset):
    def __init__(self, data_files, tokenizer=None, processor=None, config=None, max_samples=-1):
        name = data_files if isinstance(data_files, str) else list(data_files)[0]
        size = int(str(name).rsplit("-", 1)[1])
        rng = random.Random(size)
        self.pairs = [(rng.randrange(10), rng.randrange(10)) for _ in range(size)]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, idx: int) -> dict:
        a, b = self.pairs[idx]
        return {"input_ids": torch.tensor([a, b, EQ]), "index": idx, "data_source": "arith"}
