"""The example trainer's environments: one of each recovery `replay.environments` knows.

A multi-turn rollout of the example trainer ends each turn with an action (the turn's last
token); its environment answers with an observation token the policy reads next. Which
environment a prompt talks to follows from its dataset index (`environment_for`): five
prompts in eight are single-turn, one in eight talks to each environment.
"""

from __future__ import annotations

import torch

from replay.environments import Environment

from .dataset import VOCAB


class Notebook:
    """Export/restore: notes of every action taken (a count per action class) and a running
    total; the observation reads both. Its state goes into the progress row."""

    recovery = "export"

    def reset(self, prompt: int) -> int:
        self.total, self.notes = prompt % VOCAB, torch.zeros(8, dtype=torch.long)
        return self.total

    def step(self, action: int) -> int:
        self.notes[action % 8] += 1
        self.total = (self.total * 5 + action) % VOCAB
        return (self.total + int(self.notes.argmax())) % VOCAB

    def export(self) -> dict:
        return {"total": self.total, "notes": self.notes.clone()}

    def restore(self, state: dict) -> None:
        self.total, self.notes = int(state["total"]), state["notes"].clone()


class Maze:
    """Restart: a position on a ring, a function of the prompt and the actions: replaying the
    actions brings it back."""

    recovery = "restart"

    def reset(self, prompt: int) -> int:
        self.pos = prompt % 29
        return self.pos

    def step(self, action: int) -> int:
        self.pos = (self.pos + action % 5 + 1) % 29
        return self.pos + 32


class Oracle:
    """Stateless: the observation depends on the action alone."""

    recovery = "stateless"

    def reset(self, prompt: int) -> int:
        return 0

    def step(self, action: int) -> int:
        return (action * 7 + 3) % VOCAB


KINDS = (None, None, None, None, None, Notebook, Maze, Oracle)


def environment_for(idx: int) -> Environment | None:
    """A fresh environment for the prompt at dataset index `idx` (None: a single-turn rollout)."""
    cls = KINDS[idx % len(KINDS)]
    return None if cls is None else cls()
