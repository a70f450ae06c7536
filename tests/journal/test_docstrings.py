"""Every public method of `Journal` and `Transaction` says what it does (help() shows it), and a
transition's says the move it records as the ownership table has it, what it returns and
what it raises."""

from __future__ import annotations

import inspect

import pytest

from journal import LIVE_OWNERS, Journal, Transaction
from journal.kinds import KINDS, TRANSITIONS
from journal.transaction import Draft


def _public(cls) -> dict:
    """The public methods and properties `cls` defines: name -> the function."""
    out = {}
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, property):
            out[name] = attr.fget
        elif isinstance(attr, (classmethod, staticmethod)):
            out[name] = attr.__func__
        elif inspect.isfunction(attr):
            out[name] = attr
    return out


TRANSITION_CALLS = {kind.call: kind.name for kind in KINDS}


@pytest.mark.parametrize("cls", [Journal, Transaction, Draft], ids=lambda c: c.__name__)
def test_every_public_method_has_a_docstring(cls):
    methods = _public(cls)
    assert set(TRANSITION_CALLS) <= set(methods)
    missing = sorted(name for name, f in methods.items() if not (f.__doc__ or "").strip())
    assert not missing, f"{cls.__name__} methods without a docstring: {missing}"


@pytest.mark.parametrize("cls", [Journal, Transaction, Draft], ids=lambda c: c.__name__)
@pytest.mark.parametrize("call", sorted(TRANSITION_CALLS))
def test_a_transition_says_its_move_what_it_returns_and_raises(cls, call):
    doc = inspect.getdoc(getattr(cls, call)) or ""
    t = TRANSITIONS[TRANSITION_CALLS[call]]
    if t.to is not None:
        sources = ["loader"] if not t.from_owners else (
            ["any live owner"] if t.from_owners == LIVE_OWNERS else [o.name for o in t.from_owners])
        for word in sources + [t.to.name]:
            assert word in doc, f"{cls.__name__}.{call}: {word!r} (from the ownership table) not in {doc!r}"
    assert "Raises" in doc or "raises" in doc, f"{cls.__name__}.{call} does not say what it raises"
    if cls is Journal:
        assert "Returns" in doc or "returns" in doc, f"Journal.{call} does not say what it returns"
