"""How the environment of a multi-turn rollout comes back when the rollout continues after a
restore (DESIGN 12).

A multi-turn rollout records progress once per turn (`rollout_progress(..., turn=n)`); its
progress row in the data plane holds the tokens so far and `saved_state(env, actions)`: what
the environment needs to be where it was. An environment declares how it recovers:

* "export": `export()` returns its state (values the data plane stores: dict, list, str,
  int, float, bool, None, bytes, tensors), `restore(state)` puts it back on a fresh one;
* "restart": a fresh environment is reset and the recorded actions are replayed into it
  (its observations are a function of the prompt and the actions);
* "stateless": its observations depend on the action alone; nothing is saved or replayed.

    row = {"tokens": ..., "env": saved_state(env, actions)}   # the turn's progress row
    turn = resume(new_env, prompt, row["env"])                 # after a restore
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, Sequence, runtime_checkable

Recovery = Literal["export", "restart", "stateless"]
RECOVERIES: tuple[Recovery, ...] = ("export", "restart", "stateless")


@runtime_checkable
class Environment(Protocol):
    """What a multi-turn rollout talks to. `recovery` is one of `RECOVERIES`."""

    recovery: Recovery

    def reset(self, prompt: Any) -> Any:
        """Start an episode for `prompt`; returns the first observation."""

    def step(self, action: Any) -> Any:
        """Apply one turn's action; returns the observation."""


@runtime_checkable
class ExportingEnvironment(Environment, Protocol):
    """An environment with `recovery = "export"`."""

    def export(self) -> dict[str, Any]:
        """Its state now, as values the data plane stores."""

    def restore(self, state: dict[str, Any]) -> None:
        """Become the environment that exported `state` (after `reset` of the same prompt)."""


class EnvironmentRecoveryError(ValueError):
    """An environment cannot be brought back from a saved state: it declares no known recovery,
    declares "export" without `export`/`restore`, or the saved state was written for another
    recovery or is malformed. The message names the environment and the saved recovery; the
    rollout must be generated from its first turn again."""


def recovery_of(env: Environment) -> Recovery:
    """`env`'s declared recovery, checked (`EnvironmentRecoveryError` when it cannot hold)."""
    kind = getattr(env, "recovery", None)
    if kind not in RECOVERIES:
        raise EnvironmentRecoveryError(f"{type(env).__name__} declares recovery {kind!r}: it must be "
                                       f"one of {', '.join(RECOVERIES)}")
    if kind == "export" and not isinstance(env, ExportingEnvironment):
        raise EnvironmentRecoveryError(f"{type(env).__name__} declares recovery 'export' but has no "
                                       "export() and restore(state)")
    return kind


def saved_state(env: Environment, actions: Sequence[Any]) -> dict[str, Any]:
    """What a turn's progress row keeps of `env` after `actions` (one per turn so far): its
    recovery, the turn reached, the actions, and with "export" its exported state."""
    kind = recovery_of(env)
    out: dict[str, Any] = {"recovery": kind, "turn": len(actions), "actions": list(actions)}
    if kind == "export":
        out["state"] = env.export()
    return out


def resume(env: Environment, prompt: Any, saved: dict[str, Any]) -> int:
    """Bring the fresh `env` to where the rollout that saved `saved` was: reset for `prompt`,
    then its state restored ("export") or its actions replayed ("restart"). Returns the turn
    to continue at."""
    kind = recovery_of(env)
    if not isinstance(saved, dict) or saved.get("recovery") != kind:
        got = saved.get("recovery") if isinstance(saved, dict) else type(saved).__name__
        raise EnvironmentRecoveryError(f"{type(env).__name__} recovers by {kind!r}, the saved state was "
                                       f"written for {got!r}: continue the rollout with the environment "
                                       "that saved it, or generate it again")
    actions, turn = saved.get("actions"), saved.get("turn")
    if not isinstance(actions, list) or turn != len(actions) or (kind == "export" and "state" not in saved):
        raise EnvironmentRecoveryError(f"{type(env).__name__}: the saved state of turn {turn!r} is malformed "
                                       f"(its actions, turn and state disagree): generate the rollout again")
    env.reset(prompt)
    if kind == "export":
        env.restore(saved["state"])
    elif kind == "restart":
        for action in actions:
            env.step(action)
    return turn
