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

from typing import Iterable, Mapping, Sequence

import msgspec.inspect as mi

from .events import GroupRef, RolloutRef, TakenGroup

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


def _bounded(low: int, high: int):
    def rule(v):
        if not _is_int(v):
            return TypeError, f"an integer from {low} to {high}"
        return None if low <= v <= high else (ValueError, f"an integer from {low} to {high}")
    return rule


def _int_rule(t: mi.IntType):
    """An id (`events.Id`), a stored integer (`events.Int`; one without bounds is one too: a
    value msgpack cannot hold fails as one of more than 63 bits), or an integer in bounds."""
    bounds = (t.ge, t.le)
    if bounds == (0, _ID_MAX):
        return id_problem
    if bounds in ((None, None), (-_ID_MAX, _ID_MAX)):
        return _int
    return _bounded(*bounds)


def _instance(cls: type, what: str):
    return lambda v: None if isinstance(v, cls) else (TypeError, what)


def _optional(rule):
    return lambda v: None if v is None else rule(v)


def _list_of(item_rule, what: str):
    def rule(v):
        if not isinstance(v, list) or not all(item_rule(x) is None for x in v):
            return TypeError, what
        return None
    return rule


# the class a caller passes for the one the event stores (a TakenGroup is built from a GroupRef)
_SHOWN_AS = {TakenGroup: GroupRef.__name__}


def _rule(t, argument: str):
    """What a value of msgspec type `t` (of the call's `argument`) must be, as a rule: the value
    -> None, or (exception class, what it must be)."""
    if isinstance(t, mi.Metadata):
        return _rule(t.type, argument)
    if isinstance(t, mi.UnionType):  # X | None
        (inner,) = [u for u in t.types if not isinstance(u, mi.NoneType)]
        return _optional(_rule(inner, argument))
    if isinstance(t, mi.IntType):
        return _int_rule(t)
    if isinstance(t, mi.StrType):
        return _instance(str, "a str")
    if isinstance(t, mi.FloatType):
        return _instance((int, float), "a number")
    if isinstance(t, mi.BytesType):
        return _instance(bytes, "bytes")
    if isinstance(t, mi.StructType):
        return _instance(t.cls, f"a {t.cls.__name__}")
    if isinstance(t, mi.DictType):
        return _instance(dict, "a dict")
    item = t.item_type  # a list
    if isinstance(item, mi.IntType):
        return _list_of(_is_int_problem, f"a list of integer {argument.replace('_', ' ')}")
    if isinstance(item, mi.StrType):
        return _list_of(_instance(str, "a str"), "a list of str")
    return _instance(list, f"a list of {_SHOWN_AS.get(item.cls, item.cls.__name__)}")


def _is_int_problem(v):
    return None if _is_int(v) else (TypeError, "an integer")


def _field_rules(cls: type) -> list[tuple[str, str, object]]:
    """[(field, the call's argument name, rule)] of msgspec struct `cls`, in field order."""
    out = []
    for f in mi.type_info(cls).fields:
        extra = f.type.extra if isinstance(f.type, mi.Metadata) else None
        argument = (extra or {}).get("argument", f.name)
        out.append((f.name, argument, _rule(f.type, argument)))
    return out


def _item_rules(cls: type) -> list[tuple[str, bool, str, list]]:
    """[(field, whether it holds a list, the name its items are shown as, their field rules)]
    for the fields of `cls` that hold a struct or a list of structs (their items are checked
    field by field, after the event's)."""
    out = []
    for f in mi.type_info(cls).fields:
        t = f.type.type if isinstance(f.type, mi.Metadata) else f.type
        listed = isinstance(t, mi.ListType)
        t = t.item_type if listed else t
        if isinstance(t, mi.StructType):
            out.append((f.name, listed, _SHOWN_AS.get(t.cls, t.cls.__name__), _field_rules(t.cls)))
    return out


def rules_of(record: type) -> tuple[list, list]:
    """The argument rules of event record `record`, read from its schema (`events.py`: the
    bounds are its `msgspec.Meta`): [(field, argument, rule)] and [(list field, whether it
    holds a list, item name, item rules)] (`kinds.ARGUMENT_RULES` holds every kind's)."""
    return _field_rules(record), _item_rules(record)


def _nothing_written(journal: str) -> str:
    return f" (journal {journal}; nothing was written)"


def _none_named(call: str, argument: str, what: str, journal: str) -> ValueError:
    """The error of an event that names nothing (it says nothing, and is most likely an empty
    batch passed by mistake)."""
    return ValueError(f"{call}() argument {argument} must name at least one {what}, got none"
                      + _nothing_written(journal))


# The three checks below run on every transition: each is one call, its common path without
# another (a commit of 64 one-group events makes 64 of them).

def group_list(call: str, group_ids: Iterable[int], journal: str) -> list:
    """`group_ids` as the list an event of `call` stores: at least one."""
    ids = list(group_ids)
    if ids:
        return ids
    raise _none_named(call, "group_ids", "group", journal)


def group_refs(refs: Sequence[GroupRef], journal: str) -> list[GroupRef]:
    """The `refs` of `taken()`: GroupRef items, at least one."""
    if isinstance(refs, GroupRef):
        raise TypeError("taken() takes a sequence of GroupRef")
    refs = list(refs)
    if not refs:
        raise _none_named("taken", "refs", "row (a GroupRef)", journal)
    for ref in refs:
        if type(ref) is not GroupRef and not isinstance(ref, GroupRef):
            raise TypeError(f"taken() expects GroupRef items, got {type(ref).__name__}")
    return refs


def rollout_list(call: str, refs: Sequence[RolloutRef], journal: str) -> list[RolloutRef]:
    """`refs` as the list a rollout event of `call` stores: RolloutRef items, at least one, and
    for `rollout_sealed` each with the data-plane locator of its result (a seal without one
    leaves a row that no restore can find)."""
    if isinstance(refs, RolloutRef):
        raise TypeError(f"{call}() takes a sequence of RolloutRef")
    refs = list(refs)
    if not refs:
        raise _none_named(call, "refs", "rollout", journal)
    sealing = call == "rollout_sealed"
    for ref in refs:
        if type(ref) is not RolloutRef and not isinstance(ref, RolloutRef):
            raise TypeError(f"{call}() expects RolloutRef items, got {type(ref).__name__}")
        if ref.locator is None and sealing:
            raise ValueError(f"rollout_sealed() needs the locator of each result: group {ref.group_id} "
                             f"rollout {ref.index} (attempt {ref.attempt}) has none; write the row to the "
                             "data plane first and pass where it is, RolloutRef(..., locator=...)"
                             + _nothing_written(journal))
    return refs


def progress_ref(ref: RolloutRef, journal: str) -> RolloutRef:
    """The `ref` of `rollout_progress`: one RolloutRef with the locator of the partial row."""
    if not isinstance(ref, RolloutRef):
        raise TypeError(f"rollout_progress() takes one RolloutRef, got {type(ref).__name__}")
    if ref.locator is None:
        raise ValueError(f"rollout_progress() needs the locator of the partial row: group {ref.group_id} "
                         f"rollout {ref.index} (attempt {ref.attempt}) has none; write the row to the "
                         "data plane first and pass where it is, RolloutRef(..., locator=...)"
                         + _nothing_written(journal))
    return ref


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


def explain(events: list, rules: Mapping[type, tuple[str, list, list]]) -> Exception | None:
    """The error for the first argument of `events` that breaks its rule (None if none does);
    `rules`: event type -> (its call, `rules_of` it), `kinds.ARGUMENT_RULES`."""
    for ev in events:
        call, fields, lists = rules[type(ev)]
        for attr, arg, rule in fields:
            problem = rule(getattr(ev, attr))
            if problem is not None:
                return invalid(f"{call}() argument {arg}", getattr(ev, attr), problem)
        for attr, listed, shown, item_fields in lists:
            for item in getattr(ev, attr) if listed else (getattr(ev, attr),):
                for name, _arg, rule in item_fields:
                    problem = rule(getattr(item, name))
                    if problem is not None:
                        return invalid(f"{shown}.{name}", getattr(item, name), problem)
    return None
