"""The packs of a `LocalDataPlane` read as docs/format.md describes them, independently of the
library's reader: where a locator's stored rows lie, for tests that read or damage them."""

from __future__ import annotations

import os
import struct
import zlib

_HEAD = struct.Struct("<4sHHQI")


def records(path: str) -> list[tuple[bytes, str, int, int]]:
    """(tag, name, value, body offset) of every record of the pack at `path`, up to the first
    one whose header does not check."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"OJPACK01", path
    out, pos = [], 8
    while pos + _HEAD.size <= len(data):
        tag, n, zero, value, crc = _HEAD.unpack_from(data, pos)
        name = data[pos + _HEAD.size:pos + _HEAD.size + n]
        if zero != 0 or zlib.crc32(data[pos:pos + 16] + name) != crc:
            break
        body = pos + _HEAD.size + n
        out.append((tag, name.decode("ascii"), value, body))
        pos = body + (value if tag == b"ROW1" else 0)
    return out


def row_place(root: str, locator: str) -> tuple[str, int, int]:
    """(pack path, offset, length) of the stored rows of `locator` (the last record of it)."""
    found = []
    for name in sorted(os.listdir(root)):
        if name.endswith(".pack") and not name.startswith("."):
            path = os.path.join(root, name)
            found += [(path, body, value) for tag, loc, value, body in records(path)
                      if tag == b"ROW1" and loc == locator]
    assert found, f"no record of {locator} in {root}"
    return found[-1]


def stored_bytes(root: str, locator: str) -> bytes:
    path, offset, length = row_place(root, locator)
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def overwrite_rows(root: str, locator: str, data: bytes) -> None:
    """Replace the stored rows of `locator` in place by `data` (cut or zero-padded to their length)."""
    path, offset, length = row_place(root, locator)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data[:length].ljust(length, b"\0"))
