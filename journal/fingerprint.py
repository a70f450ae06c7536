"""Content fingerprints, stable across processes, Python and torch versions: of dataset rows
(`GroupRef.fingerprint`, which restore checks) and of the values of a run identity
(`identity.py`).

A value is encoded canonically (a type tag and a length before every value,
dict items sorted by their encoded key, tensors by dtype, shape and
little-endian bytes, floats by their IEEE-754 bits) and hashed with
BLAKE2b-128. Never pickle: pickle output changes between versions.
Lists and tuples encode alike, so a row that round-trips through JSON or a
collate step keeps its fingerprint; a numpy array encodes as the tensor it
converts to and a numpy scalar as its Python value.

torch is not imported to fingerprint a value without tensors: a value holding a tensor comes
from a caller that imported torch, so `fingerprint` finds it in `sys.modules`; only a numpy array
(encoded as the tensor it converts to) imports it.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from typing import Any, Mapping

FINGERPRINT_BYTES = 16
_LEN = struct.Struct("<Q")
_F64 = struct.Struct("<d")


def _encode(value: Any, out: list[bytes], tensor_type: type | tuple) -> None:
    if value is None:
        out.append(b"N")
    elif isinstance(value, bool):
        out.append(b"T" if value else b"F")
    elif isinstance(value, int):
        digits = str(value).encode()
        out += (b"i", _LEN.pack(len(digits)), digits)
    elif isinstance(value, float):
        out += (b"f", _F64.pack(value))
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out += (b"s", _LEN.pack(len(raw)), raw)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out += (b"b", _LEN.pack(len(raw)), raw)
    elif isinstance(value, tensor_type):
        torch = sys.modules["torch"]
        t = value.detach().to("cpu").contiguous()
        dtype = str(t.dtype).encode()
        flat = t.reshape(-1).view(torch.uint8)
        if sys.byteorder == "big" and t.element_size() > 1:  # pragma: no cover - little-endian hosts
            flat = t.reshape(-1).flip(0).view(torch.uint8).flip(0)
        raw = _bytes_of(flat, torch)
        out += (b"t", _LEN.pack(len(dtype)), dtype, _LEN.pack(t.dim()))
        out += [_LEN.pack(d) for d in t.shape]
        out += (_LEN.pack(len(raw)), raw)
    elif isinstance(value, (list, tuple)):
        out += (b"l", _LEN.pack(len(value)))
        for v in value:
            _encode(v, out, tensor_type)
    elif isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            kb: list[bytes] = []
            _encode(k, kb, tensor_type)
            items.append((b"".join(kb), v))
        items.sort(key=lambda kv: kv[0])
        out += (b"d", _LEN.pack(len(items)))
        for kb, v in items:
            out.append(kb)
            _encode(v, out, tensor_type)
    elif type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        if type(value).__name__ == "ndarray":
            import torch

            _encode(torch.as_tensor(value), out, torch.Tensor)  # an array is the tensor it converts to
        else:
            _encode(value.item(), out, tensor_type)  # a scalar is its Python value: np.int64(5) is 5
    else:
        raise TypeError(f"cannot fingerprint a {type(value).__name__}: a fingerprinted value holds "
                        "dict, list, tuple, str, int, float, bool, None, bytes, torch.Tensor or numpy values")


def _bytes_of(flat, torch) -> bytes:
    """The bytes of a 1-D uint8 tensor, in one bulk copy (`bytes()` of a tensor's storage reads
    it element by element, through Python)."""
    if not flat.numel():
        return b""
    buf = bytearray(flat.numel())
    torch.frombuffer(buf, dtype=torch.uint8).copy_(flat)
    return bytes(buf)


def fingerprint(row: Any) -> bytes:
    """A 16-byte content hash of a dataset row (for `GroupRef(fingerprint=...)`) or any value
    made of the types above."""
    parts: list[bytes] = []
    # without torch loaded nothing can be a tensor; () makes the isinstance in _encode False
    _encode(row, parts, getattr(sys.modules.get("torch"), "Tensor", ()))
    return hashlib.blake2b(b"".join(parts), digest_size=FINGERPRINT_BYTES).digest()
