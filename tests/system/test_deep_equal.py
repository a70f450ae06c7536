"""The one `deep_equal` the tests compare loader states and views with (tests/support/equality.py):
the three copies it replaced disagreed on NaN, -0.0 and dict order."""

from __future__ import annotations

import torch

from tests.support.equality import deep_equal


def test_deep_equal_is_exact_about_nan_signed_zero_types_and_key_order():
    nan = float("nan")
    assert deep_equal({"x": [nan, (1, None)]}, {"x": [nan, (1, None)]})       # NaN at the same place
    assert deep_equal(torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0]))
    assert not deep_equal(-0.0, 0.0)
    assert not deep_equal(torch.tensor([-0.0]), torch.tensor([0.0]))
    assert not deep_equal([1, 2], (1, 2)) and not deep_equal(True, 1) and not deep_equal(1, 1.0)
    assert not deep_equal({1: "a"}, {1.0: "a"}) and not deep_equal({True: "a"}, {1: "a"})
    assert not deep_equal(torch.tensor([1], dtype=torch.int32), torch.tensor([1], dtype=torch.int64))
    assert not deep_equal(torch.zeros(2, 1), torch.zeros(1, 2))
    swapped = ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": 3, "c": 2}, "a": 1})
    assert deep_equal(*swapped)                                  # key order is not significant ...
    assert not deep_equal(*swapped, key_order=True)              # ... unless asked for, nested too
    assert not deep_equal({"a": 1}, {"a": 1, "b": 2}) and not deep_equal({"a": nan}, {"a": 0.0})
