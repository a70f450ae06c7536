"""What each argument of a transition must be, and the error naming it when it is not.

The writer checks a commit by decoding what it encoded (the schema in `events.py` is the one
check); only when that fails does `explain` walk the events to say which argument of which
call is wrong, in words (`GroupRef.idx must be an integer >= 0, got -1`), so a good commit
pays nothing for it.

A few rules the schema cannot hold, because journals written before them hold events that
break them and must stay readable, are checked by the calls themselves, at append time only
(`group_list`, `rollout_list`, `checkpoint_step`): an event names at least one group or
rollout, a seal names where its result is, a checkpoint's step is not negative. None of
them is an ownership rule; the fold reads such old events as it always did.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .events import (Admitted, CheckpointBegun, CheckpointCommitted, Discarded, Diverted, Finished,
                     GroupRef, RolloutFailed, RolloutRef, RolloutSealed, Taken, Trained)

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


def _nothing_written(journal: str) -> str:
    return f" (journal {journal}; nothing was written)"


def _at_least_one(call: str, argument: str, items: list, what: str, journal: str) -> list:
    """`items`; ValueError when there are none (an event that names nothing says nothing, and
    is most likely an empty batch passed by mistake)."""
    if not items:
        raise ValueError(f"{call}() argument {argument} must name at least one {what}, got none"
                         + _nothing_written(journal))
    return items


def group_list(call: str, group_ids: Iterable[int], journal: str) -> list:
    """`group_ids` as the list an event of `call` stores: at least one."""
    return _at_least_one(call, "group_ids", list(group_ids), "group", journal)


def group_refs(refs: Sequence[GroupRef], journal: str) -> list[GroupRef]:
    """The `refs` of `taken()`: GroupRef items, at least one."""
    if isinstance(refs, GroupRef):
        raise TypeError("taken() takes a sequence of GroupRef")
    refs = list(refs)
    for ref in refs:
        if not isinstance(ref, GroupRef):
            raise TypeError(f"taken() expects GroupRef items, got {type(ref).__name__}")
    return _at_least_one("taken", "refs", refs, "row (a GroupRef)", journal)


def rollout_list(call: str, refs: Sequence[RolloutRef], journal: str) -> list[RolloutRef]:
    """`refs` as the list a rollout event of `call` stores: RolloutRef items, at least one, and
    for `rollout_sealed` each with the data-plane locator of its result (a seal without one
    leaves a row that no restore can find)."""
    if isinstance(refs, RolloutRef):
        raise TypeError(f"{call}() takes a sequence of RolloutRef")
    refs = list(refs)
    for ref in refs:
        if not isinstance(ref, RolloutRef):
            raise TypeError(f"{call}() expects RolloutRef items, got {type(ref).__name__}")
        if ref.locator is None and call == "rollout_sealed":
            raise ValueError(f"rollout_sealed() needs the locator of each result: group {ref.group_id} "
                             f"rollout {ref.index} (attempt {ref.attempt}) has none; write the row to the "
                             "data plane first and pass where it is, RolloutRef(..., locator=...)"
                             + _nothing_written(journal))
    return _at_least_one(call, "refs", refs, "rollout", journal)


def checkpoint_step(call: str, step, journal: str):
    """`step` of a checkpoint marker; ValueError when it is a negative integer (steps count
    from 0; the schema names a step that is no integer)."""
    if _is_int(step) and step < 0:
        raise ValueError(f"{call}() argument step must be an integer >= 0, got {step}"
                         + _nothing_written(journal))
    return step


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
