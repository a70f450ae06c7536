"""The bytes of stored rows: a checksummed frame around the tree codec, without pickle.

    MAGIC (8 bytes, b"OJROWS01") | sha256 of the body (32 bytes) | body

The body is `journal.tree_codec` with every leaf inline (no blobs): rows are a tree of dict,
list, tuple, str, int, float, bool, None, bytes, torch.Tensor and numpy.ndarray, and decode
to exactly that tree (tensors on the CPU). Nothing is decoded before the checksum matched.
"""

from __future__ import annotations

import hashlib
from typing import Any

from journal import tree_codec
from snapshot.errors import RowsCorrupt, RowsNotStorable

MAGIC = b"OJROWS01"
_DIGEST = 32
HEADER_BYTES = len(MAGIC) + _DIGEST


def encode_rows(rows: Any) -> bytes:
    """The stored bytes of `rows`; `RowsNotStorable` names a value the codec does not store."""
    body, _ = tree_codec.encode(rows, what="rows", error=RowsNotStorable)
    return MAGIC + hashlib.sha256(body).digest() + body


def checked_body(data: bytes, where: str) -> memoryview:
    """The body of the stored bytes `data` once its frame and checksum are intact, else
    `RowsCorrupt` naming `where` (the file or object)."""
    view = memoryview(data)
    if len(view) < HEADER_BYTES or view[:len(MAGIC)] != MAGIC:
        raise RowsCorrupt(f"{where}: not stored rows ({len(view)} bytes, no {MAGIC!r} header); "
                          "it was written by something else or is damaged")
    body = view[HEADER_BYTES:]
    if hashlib.sha256(body).digest() != view[len(MAGIC):HEADER_BYTES]:
        raise RowsCorrupt(f"{where}: the rows' sha256 does not match their bytes ({len(view)} "
                          "bytes): they are damaged; the group's rollouts must be generated again")
    return body


def decode_rows(data: bytes, where: str) -> Any:
    """The rows stored as `data` (`RowsCorrupt` naming `where` when they are damaged)."""
    return tree_codec.decode(checked_body(data, where), what=f"rows {where}", error=RowsCorrupt)

