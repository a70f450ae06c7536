"""Where reading a segment may start: a cut's position in the journal.

A `Position` names the start of one frame of a live segment: its offset, the LSN of its first
commit and the chain before it (with which the frame's chain checks), a bound on the group ids
the segment's commits before it allocated, and the loader-state blobs of the state there. A reader that wants the commits from that LSN
on reads the segment from the offset instead of from its header, so a restart reads the
history after the newest cut, not the history before it (`Reader` takes the positions of
every cut under `<journal>/snapshots/`; see "Positions" in docs/format.md).

Every cut holds one (`layout.POSITION_FILE`, listed in its manifest): the frame holding the
cut's LSN, and the blobs its loader state references. The format is this module's (no torch,
no pickle):

    magic "OWNJPS01" | crc32 of the rest: u32 | timeline: u32 | segment's first LSN: u64 |
    offset: u64 | LSN: u64 | chain: u32 | next group id: u64 | blob count: u32 |
    per blob: its 16-byte digest | length: u32 | bytes

A position is a hint, never trusted: the reader uses it only once the frame at its offset
is whole, verifies, chains on from its chain and starts with its LSN (`Reader`), and reads
the segment from its header otherwise. A blob is content-addressed (blake2b, `tree_codec`):
one whose bytes do not hash to its digest is dropped. A take after the position references a
blob stored before it in the segment (a loader's generator state is stored once per segment);
when that blob is not among the position's (the loader went back to an older state), the
bytes before the position are read after all (`reader._SegmentBlobs`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from typing import Mapping, NamedTuple

import msgspec

from . import format as fmt
from . import history, layout
from .events import commit_decoder

MAGIC = b"OWNJPS01"
_BODY = struct.Struct("<IQQQIQI")
_HEAD = struct.Struct("<8sI")
_BLOB = struct.Struct("<16sI")
MAX_BYTES = 64 << 20  # a position file larger than this is not read


class Position(NamedTuple):
    timeline: int          # the segment: its timeline and first LSN (`layout.segment_name`)
    segment_lsn: int
    offset: int            # where the frame starts in the segment
    lsn: int               # the LSN of the frame's first commit
    chain: int             # the chain before that commit
    next_group_id: int     # every group id the segment's commits before the frame allocated is below it
    blobs: tuple[tuple[bytes, bytes], ...] = ()  # (digest, bytes) of the loader state's blobs there

    @property
    def segment(self) -> str:
        return layout.segment_name(self.timeline, self.segment_lsn)


def with_blobs(p: Position, blobs: Mapping[bytes, bytes]) -> Position:
    """`p` carrying `blobs` (digest -> bytes), in digest order."""
    return p._replace(blobs=tuple(sorted(blobs.items())))


def encode(p: Position) -> bytes:
    parts = [_BODY.pack(p.timeline, p.segment_lsn, p.offset, p.lsn, p.chain, p.next_group_id, len(p.blobs))]
    for digest, data in p.blobs:
        parts += [_BLOB.pack(digest, len(data)), data]
    body = b"".join(parts)
    return _HEAD.pack(MAGIC, zlib.crc32(body)) + body


def decode(data: bytes) -> Position | None:
    """The position of a position file's bytes; None when they are not one (torn, damaged,
    foreign): a position is a hint, and without it the segment is read from its header."""
    if len(data) < _HEAD.size + _BODY.size:
        return None
    magic, crc = _HEAD.unpack_from(data)
    body = memoryview(data)[_HEAD.size:]
    if magic != MAGIC or zlib.crc32(body) != crc:
        return None
    *fields, count = _BODY.unpack_from(body)
    blobs, at = [], _BODY.size
    for _ in range(count):
        if at + _BLOB.size > len(body):
            return None
        digest, n = _BLOB.unpack_from(body, at)
        blob = bytes(body[at + _BLOB.size:at + _BLOB.size + n])
        at += _BLOB.size + n
        if len(blob) != n:
            return None
        if hashlib.blake2b(blob, digest_size=16).digest() == digest:
            blobs.append((digest, blob))
    return Position(*fields, tuple(blobs)) if at == len(body) else None


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
                size = os.fstat(f.fileno()).st_size  # what sizes the read: never a length it claims
                if size > MAX_BYTES:
                    continue
                data = f.read(size)
        except OSError:
            continue
        p = decode(data)
        if p is not None:
            found.append(p)
    return found


class KnownPositions:
    """The positions a reader of journal `path` may start a live segment's reads at: the cuts'
    (read on first use), each used only once it verifies (`frame_starts`)."""

    def __init__(self, path: str):
        self.path = path
        self._by_segment: dict[tuple[int, int], list[Position]] | None = None  # by LSN
        self._verified: dict[Position, bool] = {}

    def nearest(self, seg, lsn: int | None = None) -> Position | None:
        """The verified position of live segment `seg` nearest before commit `lsn` (the last
        one when None), or None."""
        if self._by_segment is None:
            self._by_segment = {}
            for p in sorted(of_cuts(self.path), key=lambda q: q.lsn):
                held = self._by_segment.setdefault((p.timeline, p.segment_lsn), [])
                if p not in held:
                    held.append(p)
        for p in reversed(self._by_segment.get((seg.timeline, seg.first_lsn), ())):
            if lsn is not None and p.lsn > lsn:
                continue
            ok = self._verified.get(p)
            if ok is None:
                ok = self._verified[p] = frame_starts(seg, p)
            if ok:
                return p
        return None


def frame_starts(seg, p: Position) -> bool:
    """Whether the frame at `p.offset` of live segment `seg` is whole, verifies, chains on from
    `p.chain` and starts with commit `p.lsn` (reading that frame only)."""
    hsize, psize = fmt.FRAME_HEADER_SIZE, fmt.RECORD_PREFIX_SIZE
    if p.offset < fmt.HEADER_SIZE or p.lsn < seg.first_lsn:
        return False
    try:
        with open(seg.path, "rb") as f:
            f.seek(p.offset)
            head = f.read(hsize)
            if len(head) < hsize:
                return False
            length, crc, chain_after = fmt.FRAME_HEADER.unpack(head)
            # the file's size bounds the read, never the length the frame claims
            if not psize < length <= os.fstat(f.fileno()).st_size - p.offset - hsize:
                return False
            payload = f.read(length)
    except OSError:
        return False
    if len(payload) != length or zlib.crc32(payload) != crc or fmt.frame_chain(payload, p.chain) != chain_after:
        return False
    (first,) = fmt.RECORD_PREFIX.unpack_from(payload)
    if first > length - psize:
        return False
    try:
        commit = commit_decoder.decode(payload[psize:psize + first])
    except (ValueError, msgspec.DecodeError):
        return False
    return commit.lsn == p.lsn


def position_of(reader, lsn: int, next_group_id: int, blobs: dict | None = None) -> Position | None:
    """The position of the frame holding commit `lsn` of `reader`'s active history, for a cut at
    `lsn` whose next group id is `next_group_id` and whose loader state references `blobs`;
    its segment is read from the nearest position before it. None when no live segment
    holds that commit."""
    tip = reader.active_timeline
    t = history.holder(reader.timelines, tip, lsn) if tip is not None and lsn > 0 else None
    segs = [s for s in reader.timelines[t].segments if s.first_lsn <= lsn] if t is not None else []
    if not segs or segs[-1].archived:
        return None
    seg = segs[-1]
    p = reader.position_in(seg, lsn)
    start, chain = (p.lsn, p.chain) if p is not None else (seg.first_lsn, seg.header.chain_seed)
    frame, last = None, None
    for last in reader.segment_records(seg, last=seg is reader.timelines[t].segments[-1],
                                     start_lsn=start, stop_lsn=lsn):
        if frame is None or last.offset != frame[0]:
            frame = (last.offset, last.commit.lsn, chain)
        chain = last.chain
    if last is None or last.commit.lsn != lsn:
        return None
    return with_blobs(Position(seg.timeline, seg.first_lsn, *frame, next_group_id), blobs or {})
