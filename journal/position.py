"""Where reading a segment may start: a cut's position in the journal.

A `Position` names the start of one frame of a live segment: its offset, the LSN of its first
commit and the chain before it (with which the frame's chain checks), and a bound on the group
ids the segment's commits before it allocated. A reader that wants the commits from that LSN
on reads the segment from the offset instead of from its header, so a restart reads the
history after the newest cut, not the history before it (`Reader` takes the positions of
every cut under `<journal>/snapshots/`; see "Positions" in docs/format.md).

Every cut holds one (`layout.POSITION_FILE`, listed in its manifest): the frame holding the
cut's LSN. The format is this module's (no torch, no pickle), 52 bytes:

    magic "OWNJPS01" | crc32 of the rest: u32 | timeline: u32 | segment's first LSN: u64 |
    offset: u64 | LSN: u64 | chain: u32 | next group id: u64

A position is a hint, never trusted: the reader uses it only once the frame at its offset
is whole, verifies, chains on from its chain and starts with its LSN (`Reader`), and reads
the segment from its header otherwise. The bytes before it are then read only if a commit
after it needs a loader-state blob stored before it (`reader._SegmentBlobs`).
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import NamedTuple

from . import layout

MAGIC = b"OWNJPS01"
_BODY = struct.Struct("<IQQQIQ")
_HEAD = struct.Struct("<8sI")
SIZE = _HEAD.size + _BODY.size


class Position(NamedTuple):
    timeline: int          # the segment: its timeline and first LSN (`layout.segment_name`)
    segment_lsn: int
    offset: int            # where the frame starts in the segment
    lsn: int               # the LSN of the frame's first commit
    chain: int             # the chain before that commit
    next_group_id: int     # every group id the segment's commits before the frame allocated is below it

    @property
    def segment(self) -> str:
        return layout.segment_name(self.timeline, self.segment_lsn)


def encode(p: Position) -> bytes:
    body = _BODY.pack(p.timeline, p.segment_lsn, p.offset, p.lsn, p.chain, p.next_group_id)
    return _HEAD.pack(MAGIC, zlib.crc32(body)) + body


def decode(data: bytes) -> Position | None:
    """The position of a position file's bytes; None when they are not one (torn, damaged,
    foreign): a position is a hint, and without it the segment is read from its header."""
    if len(data) != SIZE:
        return None
    magic, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size:]
    if magic != MAGIC or zlib.crc32(body) != crc:
        return None
    return Position(*_BODY.unpack(body))


def of_cuts(journal_path: str) -> list[Position]:
    """The positions the cuts under `<journal>/snapshots/` hold (a cut without one, or whose
    file does not read, adds none)."""
    root = os.path.join(journal_path, layout.SNAPSHOTS_DIR)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        if layout.parse_cut_dir_name(name) is None:
            continue
        try:
            with open(os.path.join(root, name, layout.POSITION_FILE), "rb") as f:
                data = f.read(SIZE + 1)
        except OSError:
            continue
        p = decode(data)
        if p is not None:
            found.append(p)
    return found
