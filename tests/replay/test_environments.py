"""The environment protocol: an environment resumed from a saved turn answers the next actions
exactly as the one that saved it would, whichever recovery it declares; a saved state is kept
through the data plane's codec; mismatches are refused by name."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from replay import LocalDataPlane
from replay.environments import (RECOVERIES, EnvironmentRecoveryError, recovery_of, resume,
                                 saved_state)


class Ledger:
    """Export/restore: a running total and a history tensor (state a replay could rebuild,
    but the environment chooses to export it)."""

    recovery = "export"

    def reset(self, prompt):
        self.total, self.seen = int(prompt), torch.zeros(8, dtype=torch.long)
        return self.total

    def step(self, action):
        self.total = (self.total * 3 + action) % 101
        self.seen[action % 8] += 1
        return self.total + int(self.seen.max())

    def export(self):
        return {"total": self.total, "seen": self.seen.clone()}

    def restore(self, state):
        self.total, self.seen = state["total"], state["seen"].clone()


class Walk:
    """Restart: its position is a function of the prompt and the actions."""

    recovery = "restart"

    def reset(self, prompt):
        self.pos = int(prompt) % 7
        return self.pos

    def step(self, action):
        self.pos = (self.pos + action) % 13
        return self.pos


class Parity:
    """Stateless: the observation depends on the action alone."""

    recovery = "stateless"

    def reset(self, prompt):
        return 0

    def step(self, action):
        return action % 2


KINDS = {"export": Ledger, "restart": Walk, "stateless": Parity}


def test_every_recovery_has_an_environment_here():
    assert set(KINDS) == set(RECOVERIES)
    assert [recovery_of(cls()) for cls in KINDS.values()] == list(KINDS)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(RECOVERIES), prompt=st.integers(0, 50),
       actions=st.lists(st.integers(0, 30), max_size=12), rest=st.lists(st.integers(0, 30), max_size=6))
def test_a_resumed_environment_answers_as_the_one_that_saved(kind, prompt, actions, rest, tmp_path_factory):
    cls = KINDS[kind]
    env = cls()
    env.reset(prompt)
    for a in actions:
        env.step(a)
    dp = LocalDataPlane(str(tmp_path_factory.mktemp("rows")))
    loc = dp.put_rollout(1, 0, 0, {"tokens": torch.tensor(actions, dtype=torch.long),
                                   "env": saved_state(env, actions)})
    fresh = cls()
    turn = resume(fresh, prompt, dp.get(loc)["env"])
    assert turn == len(actions)
    assert [fresh.step(a) for a in rest] == [env.step(a) for a in rest]


def test_restart_replays_the_actions_and_export_does_not():
    steps = []

    class Counting(Walk):
        def step(self, action):
            steps.append(action)
            return super().step(action)

    class CountingLedger(Ledger):
        def step(self, action):
            steps.append(action)
            return super().step(action)

    for cls, replayed in ((Counting, [4, 5]), (CountingLedger, [])):
        env = cls()
        env.reset(3)
        env.step(4)
        env.step(5)
        saved = saved_state(env, [4, 5])
        steps.clear()
        resume(cls(), 3, saved)
        assert steps == replayed


def test_a_saved_state_of_another_recovery_is_refused():
    env = Ledger()
    env.reset(1)
    saved = saved_state(env, [])
    with pytest.raises(EnvironmentRecoveryError, match=r"Walk recovers by 'restart'.*'export'"):
        resume(Walk(), 1, saved)


@pytest.mark.parametrize("saved", [
    {"recovery": "restart", "turn": 2, "actions": [1]},   # turn and actions disagree
    {"recovery": "restart", "turn": 0, "actions": "ab"},  # actions not a list
    "not a dict",
])
def test_a_malformed_saved_state_is_refused(saved):
    with pytest.raises(EnvironmentRecoveryError):
        resume(Walk(), 1, saved)


def test_an_export_state_without_its_state_is_refused():
    with pytest.raises(EnvironmentRecoveryError, match="malformed"):
        resume(Ledger(), 1, {"recovery": "export", "turn": 0, "actions": []})


def test_undeclared_or_unexportable_recoveries_are_refused():
    class Nothing:
        def reset(self, prompt):
            return 0

        def step(self, action):
            return 0

    class Claims:
        recovery = "export"
        reset, step = Nothing.reset, Nothing.step

    with pytest.raises(EnvironmentRecoveryError, match="declares recovery None"):
        saved_state(Nothing(), [])
    with pytest.raises(EnvironmentRecoveryError, match="no export"):
        saved_state(Claims(), [])
