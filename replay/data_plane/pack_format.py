"""The bytes of a pack: the append-only file `LocalDataPlane` stores many rows in.

    pack   = MAGIC (8 bytes, b"OJPACK01") | record | record | ...
    record = tag (4) | name length (u16) | zero (u16) | value (u64) | crc32 (u32) | name | body

All integers little-endian; the crc32 covers the 16 bytes before it and the name. Three kinds:

* tag b"ROW1": rows. The name is their locator (`names.py`), the value the body's length, the
  body the stored rows exactly as `rows.py` frames them (MAGIC, sha256 of the codec body, the
  codec body), so a record is complete only when its header's crc32 and its body's sha256
  both match.
* tag b"DEL1": a dead mark. The name is a pack's file name and the value the offset of a row
  record in it, which is deleted; no body.
* tag b"END1": the seal, the last record of a pack its writer retired in order. The name is the
  pack's own name and the value the seal's offset; no body. The writer writes it once every
  row before it was fsynced (and fsyncs it), so a reader that finds it at the end of the
  pack checks the rows' headers only: their bodies are as durable as the seal.

A pack is named `<writer>-<sequence>.pack`: the writer id (16 hex digits, random per writing
process) and the writer's pack count (8 decimal digits). docs/format.md shows one byte by byte.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from snapshot.errors import RowsCorrupt

from . import names
from .rows import HEADER_BYTES as ROWS_HEADER_BYTES
from .rows import MAGIC as ROWS_MAGIC
from .rows import checked_body

MAGIC = b"OJPACK01"
ROW, DEAD, END = b"ROW1", b"DEL1", b"END1"
SUFFIX = ".pack"
_HEAD = struct.Struct("<4sHHQ")
_CRC = struct.Struct("<I")
HEAD_BYTES = _HEAD.size + _CRC.size   # 20
_NAME = re.compile(r"[0-9a-f]{16}-[0-9]{8}" + re.escape(SUFFIX))


def pack_name(writer: str, sequence: int) -> str:
    return f"{writer}-{sequence:08d}{SUFFIX}"


def is_pack_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def _record(tag: bytes, name: str, value: int) -> bytes:
    """A record's header and name (what precedes a row's body; the whole of the others)."""
    raw = name.encode("ascii")
    head = _HEAD.pack(tag, len(raw), 0, value)
    return head + _CRC.pack(zlib.crc32(raw, zlib.crc32(head))) + raw


def row_head(locator: str, size: int) -> bytes:
    """The bytes of a row record before its body: `size` bytes of stored rows (`rows.py`)
    under `locator`."""
    return _record(ROW, locator, size)


def dead_record(pack: str, offset: int) -> bytes:
    """The mark that deletes the row record at `offset` of pack `pack`."""
    return _record(DEAD, pack, offset)


def seal_record(pack: str, offset: int) -> bytes:
    """The seal of pack `pack`, written at `offset`."""
    return _record(END, pack, offset)


def seal_bytes(pack: str) -> int:
    """The length of pack `pack`'s seal."""
    return HEAD_BYTES + len(pack)


def sealed(tail: bytes, pack: str, size: int) -> bool:
    """Whether `tail`, the last `seal_bytes(pack)` bytes of pack `pack` (`size` bytes long), is
    its seal."""
    return tail == seal_record(pack, size - seal_bytes(pack))


def body_offset(offset: int, locator: str) -> int:
    """Where the stored rows of the row record at `offset` begin."""
    return offset + HEAD_BYTES + len(locator)


def digest_of(data: bytes | memoryview) -> bytes:
    """The sha256 a rows frame carries: with the frame's length it tells two frames apart."""
    return bytes(data[len(ROWS_MAGIC):ROWS_HEADER_BYTES])


@dataclass(frozen=True)
class Record:
    """A record read from a pack: where it starts, how long it is, its kind and fields. For a
    row `name` is the locator and `value` the body's length; for a dead mark `name` is the pack
    and `value` the offset it marks. `intact`: a row's body matched its sha256."""

    offset: int
    length: int
    tag: bytes
    name: str
    value: int
    digest: bytes = b""
    intact: bool = True


def _header(data: memoryview, pos: int) -> tuple[bytes, str, int] | None:
    """(tag, name, value) of the record header at `pos`, None when it does not check."""
    tag, name_len, zero, value = _HEAD.unpack_from(data, pos)
    end = pos + HEAD_BYTES + name_len
    if tag not in (ROW, DEAD, END) or zero != 0 or end > len(data):
        return None
    raw = bytes(data[pos + HEAD_BYTES:end])
    if _CRC.unpack_from(data, pos + _HEAD.size)[0] != zlib.crc32(raw, zlib.crc32(data[pos:pos + _HEAD.size])):
        return None
    try:
        name = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    valid = names.is_locator(name) if tag == ROW else is_pack_name(name)
    return (tag, name, value) if valid else None


def read_records(data: memoryview, base: int, verify: bool = True) -> list[Record]:
    """The records in `data`, the bytes of a pack from its offset `base` (0: the magic first),
    up to where the bytes end inside a record or a header does not check. A row whose body
    fails its sha256 comes back with `intact=False` (its header checked, so its length is
    known and the records after it are read too); without `verify` (a sealed pack) bodies
    are not hashed."""
    pos, out = 0, []
    if base == 0:
        if data[:len(MAGIC)] != MAGIC:
            return out
        pos = len(MAGIC)
    while pos + HEAD_BYTES <= len(data):
        head = _header(data, pos)
        if head is None:
            break
        tag, name, value = head
        end = pos + HEAD_BYTES + len(name) + (value if tag == ROW else 0)
        if end > len(data):
            break
        if tag == ROW:
            body = data[end - value:end]
            out.append(Record(base + pos, end - pos, tag, name, value, digest_of(body),
                              not verify or _intact(body)))
        else:
            out.append(Record(base + pos, end - pos, tag, name, value))
        pos = end
    return out


def _intact(body: memoryview) -> bool:
    try:
        checked_body(body, "")
    except RowsCorrupt:
        return False
    return True
