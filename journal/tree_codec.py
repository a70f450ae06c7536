"""A tree of plain values and tensors as msgpack bytes that round-trip exactly, without pickle.

The one codec for what the library stores of the trainer's own values: a loader `state_dict()`
in the journal (`loader_state.py`, whose large leaves become blobs stored once per segment)
and the rows of a data plane (`replay/data_plane/rows.py`, every leaf inline).

A tree is dict (keys str, int, float, bool or None), list, tuple, str, int (64 bits), float,
bool, None, bytes, torch.Tensor and numpy.ndarray (numbers, bool, fixed-width bytes and str,
dates and durations). msgpack with four extension types:

| ext code | payload                                   | decodes to        |
| -------- | ----------------------------------------- | ----------------- |
| 1        | msgpack array of encoded items            | `tuple`           |
| 2        | msgpack `[dtype name, shape, raw bytes]`  | `torch.Tensor`    |
| 3        | 16-byte blake2b digest of a blob          | the blob's leaf   |
| 4        | msgpack `[dtype str, shape, raw bytes]`   | `numpy.ndarray`   |

torch and numpy are never imported to encode: a tree holding a tensor comes from a caller
that imported torch, so `encode` finds it in `sys.modules` (without it no value can be a
tensor); likewise numpy. Only decoding a tensor (array) leaf imports torch (numpy), so
`import journal` and trees without tensors stay torch-free.
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
from typing import TYPE_CHECKING, Any, Mapping

import msgspec

if TYPE_CHECKING:
    import numpy
    import torch

EXT_TUPLE, EXT_TENSOR, EXT_BLOB, EXT_NDARRAY = 1, 2, 3, 4
NDARRAY_KINDS = "biufcSUmM"  # numpy dtype kinds stored: no objects, no records, no raw voids

_encoder = msgspec.msgpack.Encoder()


class TreeCodecError(ValueError):
    """A tree holds a value that cannot be stored, or stored bytes do not decode."""


def _tensor_payload(t: torch.Tensor) -> bytes:
    torch = sys.modules["torch"]  # `t` is a tensor, so its module is loaded
    # A row-major CPU tensor's bytes are its values in order (size-1 dims take no room, whatever
    # their stride): they are encoded where they lie, with no torch op and no copy of ours (`t`
    # lives until the encoder copied them). Any other tensor is copied to one first (a conjugate
    # or negative view's bytes are not its values). Never bytes(untyped_storage()): iterated
    # element by element in Python (~36 ms for StatefulDataLoader's 5 KB generator state).
    if not (t.layout is torch.strided and t.device.type == "cpu" and t.is_contiguous()
            and not (t.is_conj() or t.is_neg() or t.is_quantized)):
        t = t.detach().to("cpu").resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)
    n = t.numel() * t.element_size()
    data = memoryview((ctypes.c_char * n).from_address(t.data_ptr())) if n else b""
    return _encoder.encode([str(t.dtype).removeprefix("torch."), list(t.shape), data])


def _ndarray_payload(a: numpy.ndarray, path: str, error: type[Exception]) -> bytes:
    if a.dtype.kind not in NDARRAY_KINDS or a.dtype.fields is not None:
        raise error(f"{path}: a numpy array of dtype {a.dtype} is not storable (kinds "
                    f"{NDARRAY_KINDS!r} only: numbers, bool, fixed-width bytes and str, dates)")
    return _encoder.encode([a.dtype.str, list(a.shape), a.tobytes(order="C")])


def encode(obj: Any, *, what: str, error: type[Exception] = TreeCodecError,
           blob_min_bytes: int | None = None) -> tuple[bytes, dict[bytes, bytes]]:
    """Encode the tree `obj`; returns the encoded tree and the blobs it references (digest ->
    bytes). Leaves (tensors, arrays or `bytes`) of at least `blob_min_bytes` become blobs; None
    keeps every leaf inline (no blobs). A value that cannot be stored raises `error`, naming
    its place in `what` (e.g. "loader_state['sampler'][0]")."""
    blobs: dict[bytes, bytes] = {}
    # without torch (numpy) loaded nothing can be a tensor (an array); () makes isinstance False
    tensor_type = getattr(sys.modules.get("torch"), "Tensor", ())
    ndarray_type = getattr(sys.modules.get("numpy"), "ndarray", ())

    def blob_or(value: Any, size: int) -> Any:
        if blob_min_bytes is None or size < blob_min_bytes:
            return value
        blob = _encoder.encode(value)
        digest = hashlib.blake2b(blob, digest_size=16).digest()
        blobs[digest] = blob
        return msgspec.msgpack.Ext(EXT_BLOB, digest)

    def walk(value: Any, path: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            if isinstance(value, int) and not isinstance(value, bool) and not (
                    -(2 ** 63) <= value < 2 ** 64):
                raise error(f"{path}: integer {value} does not fit 64 bits")
            return value
        if isinstance(value, bytes):
            return blob_or(value, len(value))
        if isinstance(value, tensor_type):
            payload = _tensor_payload(value)
            return blob_or(msgspec.msgpack.Ext(EXT_TENSOR, payload), len(payload))
        if isinstance(value, ndarray_type):
            payload = _ndarray_payload(value, path, error)
            return blob_or(msgspec.msgpack.Ext(EXT_NDARRAY, payload), len(payload))
        if isinstance(value, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            items = [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return msgspec.msgpack.Ext(EXT_TUPLE, _encoder.encode(items))
        if isinstance(value, Mapping):
            out = {}
            for k, v in value.items():
                if not (k is None or isinstance(k, (bool, int, float, str))):
                    raise error(f"{path}: key {k!r} of type {type(k).__name__} is not "
                                "str/int/float/bool/None")
                out[k] = walk(v, f"{path}[{k!r}]")
            return out
        raise error(f"{path}: {type(value).__name__} is not storable (allowed: dict, list, tuple, "
                    "str, int, float, bool, None, bytes, torch.Tensor, numpy.ndarray)")

    return _encoder.encode(walk(obj, what)), blobs


def _leaf_fields(data: bytes | memoryview, kind: str, error: type[Exception]) -> tuple[Any, list, bytes]:
    try:
        dtype_name, shape, raw = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise error(f"bad {kind} leaf: {exc}") from None
    if not isinstance(shape, list) or not isinstance(raw, bytes):
        raise error(f"bad {kind} leaf: dtype {dtype_name!r}, shape {shape!r}")
    return dtype_name, shape, raw


def _numel(shape: list, itemsize: int, raw: bytes, kind: str, dtype_name: Any,
           error: type[Exception]) -> None:
    """The shape must account for exactly the bytes stored: it is read from the file and must
    not size an allocation (an empty leaf claiming [2**28] floats allocated a GiB) or reach
    torch or numpy unchecked (a negative or non-int dimension)."""
    numel = 1
    for n in shape:
        if type(n) is not int or n < 0:
            raise error(f"bad {kind} leaf: shape {shape!r}")
        numel *= n
    if numel * itemsize != len(raw):
        raise error(f"bad {kind} leaf: shape {shape!r} of {dtype_name} needs "
                    f"{numel * itemsize} bytes, {len(raw)} are stored")


def _tensor_from_payload(data: bytes | memoryview, error: type[Exception]) -> torch.Tensor:
    import torch

    dtype_name, shape, raw = _leaf_fields(data, "tensor", error)
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype):
        raise error(f"bad tensor leaf: dtype {dtype_name!r}, shape {shape!r}")
    _numel(shape, dtype.itemsize, raw, "tensor", dtype_name, error)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    try:
        return flat.view(dtype).reshape(shape)
    except RuntimeError as exc:
        raise error(f"bad tensor leaf ({dtype_name}, {shape}): {exc}") from None


def _ndarray_from_payload(data: bytes | memoryview, error: type[Exception]) -> numpy.ndarray:
    import numpy

    dtype_str, shape, raw = _leaf_fields(data, "array", error)
    try:
        dtype = numpy.dtype(dtype_str) if isinstance(dtype_str, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in NDARRAY_KINDS or dtype.fields is not None:
        raise error(f"bad array leaf: dtype {dtype_str!r}, shape {shape!r}")
    _numel(shape, dtype.itemsize, raw, "array", dtype_str, error)
    return numpy.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def decode(tree: bytes | memoryview, *, what: str, error: type[Exception] = TreeCodecError,
           blobs: Mapping[bytes, bytes] | None = None) -> Any:
    """Rebuild the exact tree `encode` was given; `blobs` must hold every digest it references.
    Bytes that do not decode raise `error`, naming `what`."""
    blobs = blobs or {}
    expanding: set[bytes] = set()  # blobs being decoded: one that refers back to itself is damage

    def hook(code: int, data: memoryview) -> Any:
        if code == EXT_TUPLE:
            return tuple(msgspec.msgpack.decode(data, ext_hook=hook))
        if code == EXT_TENSOR:
            return _tensor_from_payload(data, error)
        if code == EXT_NDARRAY:
            return _ndarray_from_payload(data, error)
        if code == EXT_BLOB:
            digest = bytes(data)
            blob = blobs.get(digest)
            if blob is None:
                raise error(f"{what} references blob {digest.hex()} that is not stored")
            if digest in expanding:
                raise error(f"{what} blob {digest.hex()} refers to itself")
            expanding.add(digest)
            try:
                return msgspec.msgpack.decode(blob, ext_hook=hook)
            finally:
                expanding.discard(digest)
        raise error(f"unknown extension type {code} in {what}")

    try:
        return msgspec.msgpack.decode(tree, ext_hook=hook)
    except msgspec.DecodeError as exc:
        raise error(f"{what} does not decode: {exc}") from None
    except RecursionError:  # nesting (arrays, tuples, blobs) deeper than any real tree
        raise error(f"{what} is nested too deeply to decode") from None
