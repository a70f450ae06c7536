"""A tiny task for TRL's AsyncGRPOTrainer on a CPU, built in code (no download): a character-level
tokenizer, a randomly initialised Llama of ~60k parameters saved where `model=` loads it, prompts
"a+b=" and a reward of 1.0 when the first generated token is (a + b) % 10."""

from __future__ import annotations

import os

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHARS = "0123456789+="


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for c in CHARS:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def build_model_dir(path: str, tokenizer) -> str:
    """The tiny model and its tokenizer saved at `path` (once; seeded, so every run builds the same)."""
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    tmp = path + ".tmp"
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    os.rename(tmp, path)
    return path


def build_dataset(n: int) -> Dataset:
    prompts, answers = [], []
    for i in range(n):
        a, b = (i * 7) % 10, (i * 3 + i // 10) % 10
        prompts.append(f"{a}+{b}=")
        answers.append(str((a + b) % 10))
    return Dataset.from_dict({"prompt": prompts, "answer": answers, "idx": list(range(n))})


def make_reward(tokenizer):
    """reward(row, completion_ids): 1.0 when the first generated token is the answer digit."""
    def reward(row, completion_ids) -> float:
        answer = tokenizer.convert_tokens_to_ids(row["answer"])
        return 1.0 if completion_ids and completion_ids[0] == answer else 0.0
    return reward
