"""Packing of a dataloader `state_dict()` into bytes that round-trip exactly, without pickle.

The tree is msgpack with three extension types:

| ext code | payload                                   | decodes to     |
| -------- | ----------------------------------------- | -------------- |
| 1        | msgpack array of packed items             | `tuple`        |
| 2        | msgpack `[dtype name, shape, raw bytes]`  | `torch.Tensor` |
| 3        | 16-byte blake2b digest of a blob          | the blob's leaf|

Leaves (tensors or `bytes`) of at least `BLOB_MIN_BYTES` are replaced by a
digest reference (ext 3); the leaf itself, msgpack-encoded, is a blob that the
writer stores once per segment. StatefulDataLoader keeps the sampler's
generator state (about 5 KB) in every `state_dict()`; it changes once per
epoch, so a segment holds it a handful of times instead of on every `taken`.

torch is never imported to pack: a state holding a tensor comes from a caller that imported
torch, so `pack` finds it in `sys.modules` (without it no value can be a tensor). Only decoding
a tensor leaf imports torch, so `import journal` and states without tensors stay torch-free.
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
from typing import TYPE_CHECKING, Any, Mapping

import msgspec

from .events import PackedLoaderState

if TYPE_CHECKING:
    import torch

BLOB_MIN_BYTES = 512
EXT_TUPLE, EXT_TENSOR, EXT_BLOB = 1, 2, 3

_encoder = msgspec.msgpack.Encoder()


class LoaderStateError(ValueError):
    """A loader state holds a value that cannot be stored, or stored bytes do not decode."""


def _tensor_payload(t: torch.Tensor) -> bytes:
    torch = sys.modules["torch"]  # `t` is a tensor, so its module is loaded
    # A fresh row-major copy: a conjugate or negative view cannot be viewed as bytes, and
    # `.contiguous()` keeps odd strides on size-1 dims (zeros(1, 3)[:, 0] has stride 3 and
    # counts as contiguous), which `.view(torch.uint8)` rejects.
    t = t.detach().to("cpu").resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    # one copy of the contiguous bytes; bytes(untyped_storage()) iterated element by element
    # in Python (~36 ms for StatefulDataLoader's 5 KB generator state, on every taken)
    data = ctypes.string_at(raw.data_ptr(), raw.numel()) if raw.numel() else b""
    return _encoder.encode([str(t.dtype).removeprefix("torch."), list(t.shape), data])


def pack(obj: Any) -> tuple[PackedLoaderState, dict[bytes, bytes]]:
    """Pack `obj`; returns the packed state and the blobs it references (digest -> bytes)."""
    blobs: dict[bytes, bytes] = {}
    # without torch loaded nothing can be a tensor; () makes the isinstance below False
    tensor_type = getattr(sys.modules.get("torch"), "Tensor", ())

    def leaf(payload: bytes, code: int) -> msgspec.msgpack.Ext:
        if len(payload) < BLOB_MIN_BYTES:
            return msgspec.msgpack.Ext(code, payload)
        blob = _encoder.encode(msgspec.msgpack.Ext(code, payload))
        digest = hashlib.blake2b(blob, digest_size=16).digest()
        blobs[digest] = blob
        return msgspec.msgpack.Ext(EXT_BLOB, digest)

    def walk(value: Any, path: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            if isinstance(value, int) and not isinstance(value, bool) and not (
                    -(2 ** 63) <= value < 2 ** 64):
                raise LoaderStateError(f"loader_state{path}: integer {value} does not fit 64 bits")
            return value
        if isinstance(value, bytes):
            if len(value) < BLOB_MIN_BYTES:
                return value
            blob = _encoder.encode(value)
            digest = hashlib.blake2b(blob, digest_size=16).digest()
            blobs[digest] = blob
            return msgspec.msgpack.Ext(EXT_BLOB, digest)
        if isinstance(value, tensor_type):
            return leaf(_tensor_payload(value), EXT_TENSOR)
        if isinstance(value, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            items = [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return msgspec.msgpack.Ext(EXT_TUPLE, _encoder.encode(items))
        if isinstance(value, Mapping):
            out = {}
            for k, v in value.items():
                if not (k is None or isinstance(k, (bool, int, float, str))):
                    raise LoaderStateError(
                        f"loader_state{path}: key {k!r} of type {type(k).__name__} is not "
                        "str/int/float/bool/None")
                out[k] = walk(v, f"{path}[{k!r}]")
            return out
        raise LoaderStateError(
            f"loader_state{path}: {type(value).__name__} is not storable (allowed: dict, list, "
            "tuple, str, int, float, bool, None, bytes, torch.Tensor)")

    tree = _encoder.encode(walk(obj, ""))
    return PackedLoaderState(tree=tree, refs=sorted(blobs)), blobs


def _tensor_from_payload(data: bytes | memoryview) -> torch.Tensor:
    import torch

    try:
        dtype_name, shape, raw = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise LoaderStateError(f"bad tensor leaf: {exc}") from None
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype) or not isinstance(shape, list) or not isinstance(raw, bytes):
        raise LoaderStateError(f"bad tensor leaf: dtype {dtype_name!r}, shape {shape!r}")
    # The shape must account for exactly the bytes stored: it is read from the file and must
    # not size an allocation (an empty leaf claiming [2**28] floats allocated a GiB) or reach
    # torch unchecked (a negative or non-int dimension raised RuntimeError/TypeError).
    numel = 1
    for n in shape:
        if type(n) is not int or n < 0:
            raise LoaderStateError(f"bad tensor leaf: shape {shape!r}")
        numel *= n
    if numel * dtype.itemsize != len(raw):
        raise LoaderStateError(f"bad tensor leaf: shape {shape!r} of {dtype_name} needs "
                               f"{numel * dtype.itemsize} bytes, {len(raw)} are stored")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    try:
        return flat.view(dtype).reshape(shape)
    except RuntimeError as exc:
        raise LoaderStateError(f"bad tensor leaf ({dtype_name}, {shape}): {exc}") from None


def unpack(packed: PackedLoaderState, blobs: Mapping[bytes, bytes]) -> Any:
    """Rebuild the exact object `pack` was given; `blobs` must hold every digest in `packed.refs`."""

    expanding: set[bytes] = set()  # blobs being decoded: one that refers back to itself is damage

    def hook(code: int, data: memoryview) -> Any:
        if code == EXT_TUPLE:
            return tuple(msgspec.msgpack.decode(data, ext_hook=hook))
        if code == EXT_TENSOR:
            return _tensor_from_payload(data)
        if code == EXT_BLOB:
            digest = bytes(data)
            blob = blobs.get(digest)
            if blob is None:
                raise LoaderStateError(f"loader state references blob {digest.hex()} that is not stored")
            if digest in expanding:
                raise LoaderStateError(f"loader state blob {digest.hex()} refers to itself")
            expanding.add(digest)
            try:
                return msgspec.msgpack.decode(blob, ext_hook=hook)
            finally:
                expanding.discard(digest)
        raise LoaderStateError(f"unknown extension type {code} in loader state")

    try:
        return msgspec.msgpack.decode(packed.tree, ext_hook=hook)
    except msgspec.DecodeError as exc:
        raise LoaderStateError(f"loader state does not decode: {exc}") from None
    except RecursionError:  # nesting (arrays, tuples, blobs) deeper than any state_dict()
        raise LoaderStateError("loader state is nested too deeply to decode") from None
