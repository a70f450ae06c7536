"""Packing of a dataloader `state_dict()` into bytes that round-trip exactly, without pickle.

The tree is encoded by `tree_codec` (msgpack with tuple, tensor, blob and array extensions).
Leaves (tensors, arrays or `bytes`) of at least `BLOB_MIN_BYTES` are replaced by a digest
reference; the leaf itself, msgpack-encoded, is a blob that the writer stores once per segment.
StatefulDataLoader keeps the sampler's generator state (about 5 KB) in every `state_dict()`;
it changes once per epoch, so a segment holds it a handful of times instead of on every
`taken`. Packing never imports torch; decoding a tensor leaf does.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import tree_codec
from .events import PackedLoaderState

BLOB_MIN_BYTES = 512


class LoaderStateError(tree_codec.TreeCodecError):
    """A loader state holds a value that cannot be stored, or stored bytes do not decode."""


def pack(obj: Any) -> tuple[PackedLoaderState, dict[bytes, bytes]]:
    """Pack `obj`; returns the packed state and the blobs it references (digest -> bytes)."""
    tree, blobs = tree_codec.encode(obj, what="loader_state", error=LoaderStateError,
                                    blob_min_bytes=BLOB_MIN_BYTES)
    return PackedLoaderState(tree=tree, refs=sorted(blobs)), blobs


def unpack(packed: PackedLoaderState, blobs: Mapping[bytes, bytes]) -> Any:
    """Rebuild the exact object `pack` was given; `blobs` must hold every digest in `packed.refs`."""
    return tree_codec.decode(packed.tree, what="loader state", error=LoaderStateError, blobs=blobs)
