"""Scanning the bytes of one segment: what they hold, frame by frame, never what it means.

`frame_defect` says why the bytes at an offset are not an intact frame (None when they are);
`zero_fill` whether they are the zero-filled, never written rest of a preallocated segment;
`read_frame` splits and decodes an intact frame and lists the faults it holds (a chain that
does not continue, LSNs that do not follow, records that do not decode), each with where and
what. `next_intact_frame` finds where intact frames resume after bad bytes. Whether a fault
is a torn tail or corruption, and whether reading goes on past it, is the reader's
(`reader.Reader._classify` and `Reader._apply_mode`).
"""

from __future__ import annotations

import sys
import zlib
from enum import Enum
from typing import NamedTuple

import msgspec

from . import format as fmt
from .events import commit_decoder


class ProblemKind(str, Enum):
    """What is wrong at one place of a journal; the value is the name in reports and JSON."""

    TORN = "torn"        # a torn tail or header: never acknowledged, the history ends before it
    DAMAGED = "damaged"  # bytes that are not an intact frame or header, in an acknowledged part
    CHAIN = "chain"      # intact bytes that do not continue the chain checksum
    GAP = "gap"          # LSNs (or segments) missing

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


class Fault(NamedTuple):
    """A fault found at `offset` of a segment: its kind, the LSN it would have started at, what is
    wrong and the bytes it covers."""

    kind: ProblemKind
    offset: int
    lsn: int | None
    message: str
    length: int


class Frame(NamedTuple):
    """An intact frame at `offset` (up to `end`): its commits, the chain after each, the chain
    stored in it, and its faults as (index of the commit each comes before, Fault)."""

    offset: int
    end: int
    commits: list
    chains: list
    chain: int
    faults: list


UNDECIDED = -1  # `next_intact_frame` gave up: whether an intact frame follows is not known
SCAN_BUDGET_FLOOR = 64 << 20  # payload bytes checksummed before giving up, at least ...
SCAN_BUDGET_PER_BYTE = 32     # ... and this many per byte scanned


def next_intact_frame(data: bytes, start: int) -> int | None:
    """Offset of the first frame at or after `start` whose own checksum verifies, if any.

    Offsets that cannot start a frame (length field out of bounds, first
    record length out of bounds, record not starting like a commit) are ruled
    out in bulk: for each of the four byte alignments the little-endian u32
    fields are a zero-copy int32 view, so a long run of zeros or garbage costs
    a few tensor passes, not a Python loop and a CRC per byte.

    The candidates left are checksummed up to a budget (SCAN_BUDGET_*), so a scan's work is
    bounded whatever the bytes (crafted ones can make every 8th offset a candidate claiming a
    large frame: checksumming them all would be quadratic in the segment's size). Past the
    budget it returns UNDECIDED, which callers treat as damage, never as a torn tail (nothing
    is cut off on a guess)."""
    import torch  # only a damaged segment is scanned: reading an intact journal needs no torch

    end = len(data)
    first = fmt.FRAME_HEADER_SIZE + fmt.RECORD_PREFIX_SIZE  # a frame's first record starts here
    mv = memoryview(data)
    candidates: list[int] = []
    buf = bytearray(data)  # torch views need a writable buffer
    lead = torch.frombuffer(buf, dtype=torch.uint8) if end else None
    for k in range(4):
        base = start + k
        m = (end - base - first - 1) // 4 + 1  # positions base + 4i with room for a 1-byte record
        if m <= 0:
            continue
        words = torch.frombuffer(buf, dtype=torch.int32, offset=base, count=m + 3)
        if sys.byteorder != "little":  # pragma: no cover
            words = words.byteswap() if hasattr(words, "byteswap") else words
        length, record = words[:m].to(torch.int64), words[3:m + 3].to(torch.int64)
        room = (end - base - fmt.FRAME_HEADER_SIZE) - 4 * torch.arange(m, dtype=torch.int64)
        ok = ((length > fmt.RECORD_PREFIX_SIZE) & (length <= room) & (record > 0)
              & (record <= length - fmt.RECORD_PREFIX_SIZE)
              & (lead[base + first:base + first + 4 * m:4] == fmt.COMMIT_LEAD_BYTE))
        candidates += (base + 4 * ok.nonzero().flatten()).tolist()
    budget, spent = SCAN_BUDGET_FLOOR + SCAN_BUDGET_PER_BYTE * max(0, end - start), 0
    for pos in sorted(candidates):
        length, crc, _chain = fmt.decode_frame_header(data, pos)
        spent += length
        if spent > budget:
            return UNDECIDED
        body = pos + fmt.FRAME_HEADER_SIZE
        if zlib.crc32(mv[body:body + length]) == crc:
            return pos
    return None


def zero_fill(data: bytes, pos: int) -> int | None:
    """Where the zero bytes that start at frame offset `pos` end, one of three cases:

    * None: the frame header at `pos` (or what is left of it) is not all zeros: an ordinary bad
      frame, a torn tail or damage as the reader classifies it;
    * `len(data)`: every byte from `pos` to the end of the file is zero: the preallocated,
      never written rest of a segment (a writer fills frames in over zeros), the end of its log;
    * any other offset: the first non-zero byte after a zero frame header. Damage when an intact
      frame follows (frames are written in order, each after the ones before it were fsynced, so
      a frame after a hole was written after the hole's frame was durable); otherwise a torn
      tail: a crash can leave a zero-fill or a frame over zeros torn, any bytes in its lost part.
      The reader decides which (`reader.Reader._classify`)."""
    head = bytes(data[pos:pos + fmt.FRAME_HEADER_SIZE])
    if head.count(0) != len(head):
        return None
    end = len(data)
    if data.count(0, pos) == end - pos:
        return end
    return end - len(bytes(data[pos:]).lstrip(b"\0"))


def frame_defect(data, pos: int) -> str | None:
    """Why the bytes at `pos` are not a whole frame whose payload checksum verifies (None: they are)."""
    end = len(data)
    if end - pos < fmt.FRAME_HEADER_SIZE:
        return f"frame header cut short ({end - pos} bytes left)"
    length, crc, _chain = fmt.decode_frame_header(data, pos)
    body = pos + fmt.FRAME_HEADER_SIZE
    if length == 0 or length > fmt.MAX_FRAME_BYTES:
        return f"frame length {length} out of bounds"
    if length > end - body:
        return f"frame length {length} runs past the end of the file ({end - body} bytes left)"
    if zlib.crc32(memoryview(data)[body:body + length]) != crc:
        return "frame checksum mismatch"
    return None


def read_frame(data, pos: int, chain: int | None, lsn: int | None) -> Frame:
    """The intact frame at `pos` (its payload checksum verified), read on from `chain` and `lsn`
    (None: not known, after skipped bytes; nothing is checked against them)."""
    length, _crc, frame_chain = fmt.FRAME_HEADER.unpack_from(data, pos)
    body = pos + fmt.FRAME_HEADER_SIZE
    stop, size = body + length, fmt.FRAME_HEADER_SIZE + length
    try:
        commits, chains = fmt.decode_records(memoryview(data)[body:stop], commit_decoder.decode, chain)
    except (ValueError, msgspec.DecodeError) as exc:
        return Frame(pos, stop, [], [], frame_chain,
                     [(0, Fault(ProblemKind.DAMAGED, pos, lsn, f"frame verifies but does not decode: {exc}", size))])
    faults = []
    if chain is None:
        chains = [frame_chain] * len(commits)
    elif chains[-1] != frame_chain:
        faults.append((0, Fault(ProblemKind.CHAIN, pos, lsn,
                                f"frame does not continue the chain (stored {frame_chain:#010x}, "
                                f"computed {chains[-1]:#010x}): a frame is missing, stale or reordered", size)))
    lsns = [c.lsn for c in commits]
    if lsn is not None and lsns[0] != lsn:
        faults.append((0, Fault(ProblemKind.GAP, pos, lsn, f"frame starts at LSN {lsns[0]}, expected {lsn}", size)))
    if lsns != list(range(lsns[0], lsns[0] + len(lsns))):
        for i in range(1, len(lsns)):
            if lsns[i] != lsns[i - 1] + 1:
                faults.append((i, Fault(ProblemKind.GAP, pos, lsns[i - 1] + 1,
                                        f"commit LSN {lsns[i]} inside a frame does not follow {lsns[i - 1]}",
                                        size)))
    return Frame(pos, stop, commits, chains, frame_chain, faults)
