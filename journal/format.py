"""Byte layout of segment files and frames (see the package docstring for the prose).

Everything here is pure: bytes in, values out. The grammar, a worked example and
the trade-offs are in docs/format.md. Reading files and deciding what a bad frame
means (torn tail or corruption) is `reader.py`'s job.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from .compat import UNMARKED

MAGIC = b"OWNJRNL1"
FORMAT_VERSION = 1
HEADER_SIZE = 64
FRAME_HEADER_SIZE = 12
RECORD_PREFIX_SIZE = 4
MAX_FRAME_BYTES = 1 << 30  # a frame length above this is damage, never an allocation
# Every commit record is a msgpack array of Commit's three fields; the reader uses
# this first byte to find candidate frames after damage. Adding a field to Commit
# changes it (and is a format version bump anyway).
COMMIT_LEAD_BYTE = 0x93

# magic, version, run_id, timeline, parent_timeline, first_lsn, chain_seed, group mark, reserved
_HEADER = struct.Struct("<8sI16sIIQIQ4x")
_HEADER_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<III")  # payload length, crc32(payload), chain after the frame's last commit
_U32 = struct.Struct("<I")


class SegmentHeader(NamedTuple):
    run_id: bytes
    timeline: int
    parent_timeline: int
    first_lsn: int
    chain_seed: int
    # 1 + the lowest group id no history had allocated when the segment was planned (every
    # id any timeline allocated before the segment's first commit is below it); `UNMARKED`
    # in an older segment (`compat`). See docs/format.md, "Marks".
    group_mark: int = UNMARKED

    @property
    def next_group_id(self) -> int | None:
        """Every group id allocated before this segment is below this (None: not recorded)."""
        return None if self.group_mark == UNMARKED else self.group_mark - 1


def group_mark(next_group_id: int) -> int:
    """The header's encoding of `next_group_id` (see `SegmentHeader.group_mark`)."""
    return next_group_id + 1


class HeaderError(ValueError):
    pass


def encode_header(h: SegmentHeader) -> bytes:
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, h.run_id, h.timeline, h.parent_timeline,
                        h.first_lsn, h.chain_seed, h.group_mark)
    return body + _HEADER_CRC.pack(zlib.crc32(body))


def decode_header(data: bytes) -> SegmentHeader:
    if len(data) < HEADER_SIZE:
        raise HeaderError(f"header is {len(data)} bytes, expected {HEADER_SIZE}")
    body = data[:HEADER_SIZE - 4]
    (crc,) = _HEADER_CRC.unpack_from(data, HEADER_SIZE - 4)
    magic, version, run_id, timeline, parent, first_lsn, seed, mark = _HEADER.unpack(body)
    if magic != MAGIC:
        raise HeaderError(f"bad magic {magic!r}")
    if zlib.crc32(body) != crc:
        raise HeaderError("header checksum mismatch")
    if version != FORMAT_VERSION:
        raise HeaderError(f"format version {version} is not supported (this code reads {FORMAT_VERSION})")
    return SegmentHeader(run_id, timeline, parent, first_lsn, seed, mark)


def chain_next(chain: int, record: bytes) -> int:
    """Chain checksum after one commit record: CRC-32 over (length, bytes), seeded by the last one."""
    return zlib.crc32(record, zlib.crc32(_U32.pack(len(record)), chain))


def record_chains(records, chain_before: int) -> list[int]:
    """The chain after each of `records` (encoded commits, in order), starting from `chain_before`."""
    chains = []
    chain = chain_before
    for r in records:
        chain = chain_next(chain, r)
        chains.append(chain)
    return chains


# The chain after a frame is `frame_chain(payload, chain_before)`, one CRC-32 over the whole
# payload seeded with the chain before it. This holds because a payload is exactly its records'
# length prefixes and bytes back to back, and `chain_next` is CRC-32 continued over a record's
# prefix and bytes: `frame_chain(payload, c) == record_chains(split_records(payload), c)[-1]`.
# A reader that verified a frame's payload CRC checks its chain with this one call, without
# splitting the payload into records (the reader's fast path).
frame_chain = zlib.crc32


def encode_frame(records: list[bytes], chain_before: int) -> tuple[bytes, list[int]]:
    """One frame holding `records` (encoded commits); returns the bytes and the chain after each."""
    chains = record_chains(records, chain_before)
    return (frame_of_prefixed([length_prefixed(r) for r in records], chains[-1] if chains else chain_before),
            chains)


def length_prefixed(record: bytes) -> bytes:
    """An encoded commit as a frame's payload holds it: its length (u32), then its bytes. The
    chain after it is `frame_chain(length_prefixed(record), chain_before)` (= `chain_next`)."""
    return _U32.pack(len(record)) + record


def frame_of_prefixed(prefixed: list[bytes], chain_after: int) -> bytes:
    """One frame holding the `length_prefixed` records `prefixed`, `chain_after` the chain after
    the last of them."""
    payload = prefixed[0] if len(prefixed) == 1 else b"".join(prefixed)
    return _FRAME.pack(len(payload), zlib.crc32(payload), chain_after) + payload


FRAME_HEADER = _FRAME    # for readers' hot loops: unpack_from(data, offset) -> (length, crc, chain)
RECORD_PREFIX = _U32     # a record's length prefix inside a frame payload


class FrameHeader(NamedTuple):
    length: int
    crc: int
    chain: int


def decode_frame_header(data, offset: int) -> FrameHeader:
    return FrameHeader(*_FRAME.unpack_from(data, offset))


def split_records(payload) -> list[memoryview]:
    """The commit records of a frame payload whose crc already verified; ValueError if malformed."""
    return _split(payload, None, None)[0]


def decode_records(payload, decode, chain_before: int | None) -> tuple[list, list[int] | None]:
    """`decode` of each record of `payload` (as `split_records` splits it) and, from
    `chain_before` (None: not computed), the chain after each."""
    return _split(payload, decode, chain_before)


def _split(payload, decode, chain: int | None) -> tuple[list, list[int] | None]:
    """The one record splitter (one pass: it runs for every commit of a group-commit frame). With
    `chain`, each record's chain is `frame_chain` over its prefix and bytes: the frame-chain
    identity for a frame of that one record (equal to `chain_next`)."""
    mv = memoryview(payload)
    unpack, psize, step = _U32.unpack_from, RECORD_PREFIX_SIZE, frame_chain
    out: list = []
    chains: list[int] | None = None if chain is None else []
    pos, end = 0, len(mv)
    while pos < end:
        if end - pos < psize:
            raise ValueError(f"record prefix cut at payload offset {pos}")
        (n,) = unpack(mv, pos)
        stop = pos + psize + n
        if n == 0 or stop > end:
            raise ValueError(f"record length {n} at payload offset {pos} exceeds the frame")
        out.append(mv[pos + psize:stop] if decode is None else decode(mv[pos + psize:stop]))
        if chains is not None:
            chain = step(mv[pos:stop], chain)
            chains.append(chain)
        pos = stop
    if not out:
        raise ValueError("empty frame")
    return out, chains
