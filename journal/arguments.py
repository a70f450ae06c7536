"""What each argument of a transition must be, and the error naming it when it is not.

The writer checks a commit by decoding what it encoded (the schema in `events.py` is the one
check); only when that fails does `explain` walk the events to say which argument of which
call is wrong, in words (`GroupRef.idx must be an integer >= 0, got -1`), so a good commit
pays nothing for it.
"""

from __future__ import annotations

from .events import (Admitted, CheckpointBegun, CheckpointCommitted, Discarded, Diverted, Finished,
                     RolloutFailed, RolloutSealed, Taken, Trained)

_ID_MAX = 2 ** 63 - 1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def id_problem(v):
    """None when `v` is a valid id or row number, else (exception class, what it must be)."""
    if not _is_int(v):
        return TypeError, "an integer >= 0"
    if v < 0:
        return ValueError, "an integer >= 0"
    return None if v <= _ID_MAX else (ValueError, "an integer of at most 63 bits")


def _int(v):
    if not _is_int(v):
        return TypeError, "an integer"
    return None if -_ID_MAX <= v <= _ID_MAX else (ValueError, "an integer of at most 63 bits")


def _str(v):
    return None if isinstance(v, str) else (TypeError, "a str")


def _bytes(v):
    return None if isinstance(v, bytes) else (TypeError, "bytes")


def _optional(rule):
    return lambda v: None if v is None else rule(v)


def _group_ids(v):
    if not isinstance(v, list) or not all(_is_int(g) for g in v):
        return TypeError, "a list of integer group ids"
    return None


def _locators(v):
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        return TypeError, "a list of str"
    return None


def _bounded(low: int, high: int):
    def rule(v):
        if not _is_int(v):
            return TypeError, f"an integer from {low} to {high}"
        return None if low <= v <= high else (ValueError, f"an integer from {low} to {high}")
    return rule


def _rollout_refs(v):
    return None if isinstance(v, list) else (TypeError, "a list of RolloutRef")


# event class -> (the call it comes from, [(field, argument name, rule)]), in field order
RULES = {
    Diverted: ("diverted", [("groups", "group_ids", _group_ids)]),
    Admitted: ("admitted", [("groups", "group_ids", _group_ids), ("target_step", "target_step", _int),
                            ("policy_version", "policy_version", _optional(_int)),
                            ("replaces", "replaces", _optional(_int)),
                            ("rollouts", "rollouts", _optional(_bounded(1, 65535)))]),
    Finished: ("finished", [("groups", "group_ids", _group_ids),
                            ("policy_version", "policy_version", _optional(_int)),
                            ("locators", "locators", _optional(_locators))]),
    Trained: ("trained", [("groups", "group_ids", _group_ids), ("step", "step", _int)]),
    Discarded: ("discarded", [("groups", "group_ids", _group_ids), ("reason", "reason", _str)]),
    RolloutSealed: ("rollout_sealed", [("rollouts", "refs", _rollout_refs),
                                       ("policy_version", "policy_version", _optional(_int))]),
    RolloutFailed: ("rollout_failed", [("rollouts", "refs", _rollout_refs), ("reason", "reason", _str)]),
    CheckpointBegun: ("begin_checkpoint", [("step", "step", _int)]),
    CheckpointCommitted: ("commit_checkpoint", [("step", "step", _int)]),
}
CALLS = {Taken: "taken", **{event: call for event, (call, _) in RULES.items()}}  # event -> its method
GROUP_REF_RULES = [("group_id", id_problem), ("idx", id_problem), ("task_name", _optional(_str)),
                   ("epoch", _optional(_int)), ("fingerprint", _optional(_bytes))]
ROLLOUT_REF_RULES = [("group_id", id_problem), ("index", _bounded(0, 65534)), ("attempt", id_problem),
                     ("locator", _optional(_str))]


def invalid(name: str, value, problem) -> Exception:
    cls, must = problem
    return cls(f"{name} must be {must}, got {value!r}")


def explain(events: list) -> Exception | None:
    """The error for the first argument of `events` that breaks its rule (None if none does)."""
    for ev in events:
        if type(ev) is Taken:
            for g in ev.groups:
                for attr, rule in GROUP_REF_RULES:
                    problem = rule(getattr(g, attr))
                    if problem is not None:
                        return invalid(f"GroupRef.{attr}", getattr(g, attr), problem)
            continue
        call, fields = RULES.get(type(ev), (None, ()))
        for attr, arg, rule in fields:
            problem = rule(getattr(ev, attr))
            if problem is not None:
                return invalid(f"{call}() argument {arg}", getattr(ev, attr), problem)
        for ref in ev.rollouts if type(ev) in (RolloutSealed, RolloutFailed) else ():
            for attr, rule in ROLLOUT_REF_RULES:
                problem = rule(getattr(ref, attr))
                if problem is not None:
                    return invalid(f"RolloutRef.{attr}", getattr(ref, attr), problem)
    return None
