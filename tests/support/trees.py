"""Hypothesis strategies for the trees the tree codec stores (loader states, data-plane rows):
scalars, bytes short and long, tensors of every stored dtype in awkward views, numpy arrays,
nested in lists, tuples and dicts; `AWKWARD` tensors that once broke the codec."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import strategies as st

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool, torch.complex64]
NP_DTYPES = ["<f4", ">f8", "<i8", ">i2", "|u1", "|b1", "<c8", "<U3", "|S4", "<M8[ns]", "<m8[s]"]


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    if draw(st.integers(0, 9)) == 0:
        shape = [draw(st.integers(130, 300))]  # large enough to become a blob
    n = math.prod(shape)
    raw = draw(st.binary(min_size=n * torch.empty(0, dtype=dtype).element_size(),
                         max_size=n * torch.empty(0, dtype=dtype).element_size()))
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape) if n else \
        torch.empty(shape, dtype=dtype)
    t = t.clone() if t.numel() else t
    view = draw(st.sampled_from(["plain", "plain", "transposed", "strided", "conj"]))
    if view == "transposed" and t.dim() == 2:
        t = t.t()
    elif view == "strided":  # every other element; a size-1 result keeps stride 2
        t = torch.stack([t.reshape(-1), t.reshape(-1)], dim=1)[:, 0]
    elif view == "conj" and t.is_complex():
        t = t.conj()
    return t


@st.composite
def arrays(draw):
    dtype = np.dtype(draw(st.sampled_from(NP_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    raw = draw(st.binary(min_size=math.prod(shape) * dtype.itemsize,
                         max_size=math.prod(shape) * dtype.itemsize))
    a = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return a.T if draw(st.booleans()) else a  # a transposed view is not C-contiguous


scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                    st.binary(max_size=40), st.binary(min_size=512, max_size=700), tensors(),
                    arrays())
keys = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.booleans(), st.none())
values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.lists(kids, max_size=4).map(tuple),
    st.dictionaries(keys, kids, max_size=4)), max_leaves=12)

AWKWARD = {
    "0-d": lambda: torch.tensor(3.25),
    "empty": lambda: torch.empty(0, 3, dtype=torch.int16),
    "transposed": lambda: torch.arange(12).reshape(3, 4).t(),
    "size-1 column view (stride 3)": lambda: torch.arange(3.0).reshape(1, 3)[:, 0],
    "stepped slice": lambda: torch.arange(10, dtype=torch.int32)[::3],
    "conjugate view": lambda: torch.tensor([1 + 2j, 3 - 1j]).conj(),
    "negative-bit view": lambda: torch.tensor([1 + 2j]).conj().imag,
    "bfloat16": lambda: torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    "bool": lambda: torch.tensor([[True, False]]),
    "expanded": lambda: torch.tensor([7]).expand(600),  # becomes a 4.8 KB blob
}
