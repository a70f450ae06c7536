"""`deep_equal`: the one exact comparison of loader states and state views the tests use."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def deep_equal(a: Any, b: Any, *, key_order: bool = False) -> bool:
    """Exact equality: the same types all the way down (tuple is not list, bool is not int, a key
    1 is not a key 1.0), tensors and numpy arrays equal in dtype (byte order too), shape and
    bytes, floats and tensors alike with NaN equal to NaN at the same place and -0.0 distinct
    from 0.0. Dicts need the same keys and equal values; their key order counts only with
    `key_order=True` (for what the journal hands back as it was given: a loader state keeps its
    insertion order through a round trip)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and _tensor_bytes(a) == _tensor_bytes(b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(deep_equal(x, y, key_order=key_order) for x, y in zip(a, b))
    if isinstance(a, dict):
        if key_order and list(a) != list(b):
            return False
        return ({k: type(k) for k in a} == {k: type(k) for k in b}
                and all(deep_equal(a[k], b[k], key_order=key_order) for k in a))
    return a == b
