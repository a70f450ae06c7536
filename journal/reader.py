"""Reading a journal directory: segments, timelines, frames, and what damage means.

The reader never writes. It walks segments in (timeline, first LSN) order,
checks every header, frame checksum, chain link and LSN, and classifies a bad
frame explicitly (compare LevelDB's `log_reader.cc`):

* **torn tail**: the bad bytes run to the end of the *last* segment of a
  timeline, no intact frame follows them, and no other timeline branches off
  at or after them. It was never acknowledged; the history ends just before
  it (the writer cuts it off on open).
* **damage**: anything else (a bad frame followed by an intact one, a bad
  sealed segment, lost frames a later branch depends on, a frame that verifies
  but does not chain, a gap in LSNs).

Modes: `strict` raises `JournalCorrupt` at damage; `point_in_time` ends the
history at the first damage; `salvage` skips damaged frames and goes on
(inspection only: the result can have gaps). Every skipped or torn region is
listed in `Reader.problems`.
"""

from __future__ import annotations

import os
import sys
import zlib
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import msgspec
import zstandard

from . import format as fmt
from . import layout
from .errors import JournalCorrupt
from .events import Commit, Taken, commit_decoder
from .fold import State, fold_records

MODES = ("strict", "point_in_time", "salvage")


@dataclass
class Segment:
    """One segment file (live or archived) and what scanning it found."""

    path: str
    timeline: int
    first_lsn: int
    archived: bool
    size: int
    header: fmt.SegmentHeader | None = None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass
class Timeline:
    """A branch of history: its segments, parent and branch point (LSN before its first commit)."""

    timeline: int
    parent: int
    branch_lsn: int
    segments: list[Segment] = field(default_factory=list)


class Problem(NamedTuple):
    kind: str        # "torn" | "damaged" | "chain" | "gap"
    segment: str
    offset: int
    lsn: int | None  # LSN the damaged frame would have started at
    message: str
    length: int      # bytes covered (to end of file for a torn tail)


class Record(NamedTuple):
    """One decoded commit with where it was found and the chain checksum after it."""

    commit: Commit
    chain: int
    timeline: int
    segment: str
    offset: int
    blobs: dict  # the segment's blob table (digest -> bytes) as of this commit


class TornTail(NamedTuple):
    segment: Segment
    offset: int   # first byte that is not part of a valid frame (the truncation point)
    size: int     # file size


def list_segments(path: str) -> list[Segment]:
    """Segments in `path` sorted by (timeline, first_lsn); a live file wins over its archive."""
    found: dict[tuple[int, int], Segment] = {}
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        raise
    for name in names:
        parsed = layout.parse_segment_name(name)
        if parsed is None:
            continue
        timeline, first_lsn, archived = parsed
        full = os.path.join(path, name)
        key = (timeline, first_lsn)
        if key in found and not found[key].archived:
            continue
        found[key] = Segment(full, timeline, first_lsn, archived, os.path.getsize(full))
    return [found[k] for k in sorted(found)]


def read_segment_bytes(seg: Segment) -> bytes:
    with open(seg.path, "rb") as f:
        data = f.read()
    if not seg.archived:
        return data
    # Stream it: `decompress()` allocates the content size the zstd frame header *claims*
    # up front (a 2 KB archive claiming 1.5 GiB allocated 1.5 GiB). Fed in small steps, the
    # output grows with the bytes that really come out, checked against the same bound.
    limit = fmt.MAX_FRAME_BYTES * 2
    chunks, total = [], 0
    try:
        dobj = zstandard.ZstdDecompressor().decompressobj()
        for i in range(0, len(data), 1 << 12):
            out = dobj.decompress(data[i:i + (1 << 12)])
            total += len(out)
            if total > limit:
                raise zstandard.ZstdError(f"decompresses to more than {limit} bytes")
            chunks.append(out)
            if dobj.eof:
                break
        if not dobj.eof:
            raise zstandard.ZstdError("the file ends inside its zstd frame")
    except zstandard.ZstdError as exc:
        raise JournalCorrupt(f"{seg.name}: archived segment does not decompress: {exc}",
                             segment=seg.name, offset=0) from None
    return b"".join(chunks)


UNDECIDED = -1  # `_next_intact_frame` gave up: whether an intact frame follows is not known
SCAN_BUDGET_FLOOR = 64 << 20  # payload bytes checksummed before giving up, at least ...
SCAN_BUDGET_PER_BYTE = 32     # ... and this many per byte scanned


def _next_intact_frame(data: bytes, start: int) -> int | None:
    """Offset of the first frame at or after `start` whose own checksum verifies, if any.

    Offsets that cannot start a frame (length field out of bounds, first
    record length out of bounds, record not starting like a commit) are ruled
    out in bulk: for each of the four byte alignments the little-endian u32
    fields are a zero-copy int32 view, so a long run of zeros or garbage costs
    a few tensor passes, not a Python loop and a CRC per byte.

    The candidates left are checksummed up to a budget (SCAN_BUDGET_*): bytes crafted so
    that every 8th offset passes the filters and claims a 1 MiB frame made a 4 MiB segment
    take minutes (64 MiB: days), quadratic work. Past the budget it returns UNDECIDED,
    which callers treat as damage, never as a torn tail (nothing is cut off on a guess)."""
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


def _split_frame(data, mv, body: int, stop: int, chain: int, lsn: int) -> list:
    """The (commit, chain after it) pairs of a verified frame payload holding several commits
    whose LSNs run on from `lsn`; () when it does not split cleanly (the caller then
    classifies the frame). Raises what decoding raises."""
    record_length, decode, crc32 = fmt.RECORD_PREFIX.unpack_from, commit_decoder.decode, zlib.crc32
    psize = fmt.RECORD_PREFIX_SIZE
    found, c, rpos = [], chain, body
    while stop - rpos >= psize:
        (n,) = record_length(data, rpos)
        rend = rpos + psize + n
        if n == 0 or rend > stop:
            return ()
        commit = decode(mv[rpos + psize:rend])
        if commit.lsn != lsn:
            return ()
        c = crc32(mv[rpos:rend], c)
        found.append((commit, c))
        rpos, lsn = rend, lsn + 1
    return found if rpos == stop else ()


class Reader:
    """Read-only view of a journal directory. Takes no lock; safe beside a live writer."""

    def __init__(self, path: str, mode: str = "strict"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not os.path.isdir(path):
            raise FileNotFoundError(f"journal directory {path!r} does not exist")
        self.path = path
        self.mode = mode
        self.problems: list[Problem] = []
        self.torn: dict[int, TornTail] = {}  # timeline -> its torn tail, when one was found
        self.segments = list_segments(path)
        self.run_id: bytes | None = None
        self.timelines: dict[int, Timeline] = {}
        self._headers_read = False
        self._read_headers()

    # -- headers and timelines -------------------------------------------------

    def _read_headers(self) -> None:
        kept = []
        by_timeline: dict[int, list[Segment]] = {}
        for seg in self.segments:
            by_timeline.setdefault(seg.timeline, []).append(seg)
        for timeline, segs in by_timeline.items():
            for i, seg in enumerate(segs):
                last = i == len(segs) - 1
                head = self._header_bytes(seg)
                try:
                    seg.header = fmt.decode_header(head)
                except fmt.HeaderError as exc:
                    if last and (len(head) < fmt.HEADER_SIZE or not any(head)
                                 or (not seg.archived and seg.size <= fmt.HEADER_SIZE)) and \
                            _next_intact_frame(read_segment_bytes(seg), fmt.HEADER_SIZE) is None:
                        # created but its header never became durable: a torn segment. Not when
                        # an intact frame follows: frames are written only after the header was
                        # fsynced, so those are acknowledged commits under a damaged header.
                        # A header-only file whose header is garbage is torn too: a crash before
                        # the header's fsync can leave any bytes there (ALICE "garbage" state)
                        self.torn[timeline] = TornTail(seg, 0, seg.size)
                        self.problems.append(Problem("torn", seg.name, 0, seg.first_lsn,
                                                     f"segment header incomplete ({exc})", seg.size))
                        continue
                    self._damage(Problem("damaged", seg.name, 0, seg.first_lsn,
                                         f"bad segment header: {exc}", fmt.HEADER_SIZE))
                    continue
                h = seg.header
                if (h.timeline, h.first_lsn) != (seg.timeline, seg.first_lsn):
                    self._damage(Problem("damaged", seg.name, 0, seg.first_lsn,
                                         f"header says timeline {h.timeline} LSN {h.first_lsn}, "
                                         "the file name disagrees", fmt.HEADER_SIZE))
                    continue
                if self.run_id is None:
                    self.run_id = h.run_id
                elif h.run_id != self.run_id:
                    self._damage(Problem("damaged", seg.name, 0, seg.first_lsn,
                                         f"segment belongs to run {h.run_id.hex()}, not "
                                         f"{self.run_id.hex()}", fmt.HEADER_SIZE))
                    continue
                kept.append(seg)
        self.segments = sorted(kept, key=lambda s: (s.timeline, s.first_lsn))
        for seg in self.segments:
            tl = self.timelines.get(seg.timeline)
            if tl is None:
                tl = self.timelines[seg.timeline] = Timeline(
                    seg.timeline, seg.header.parent_timeline, seg.first_lsn - 1)
            tl.segments.append(seg)

    @staticmethod
    def _header_bytes(seg: Segment) -> bytes:
        """The first HEADER_SIZE bytes; an archive is decompressed only as far as that."""
        with open(seg.path, "rb") as f:
            if not seg.archived:
                return f.read(fmt.HEADER_SIZE)
            try:
                with zstandard.ZstdDecompressor().stream_reader(f) as z:
                    head = b""
                    while len(head) < fmt.HEADER_SIZE:
                        more = z.read(fmt.HEADER_SIZE - len(head))
                        if not more:
                            break
                        head += more
                    return head
            except zstandard.ZstdError as exc:
                raise JournalCorrupt(f"{seg.name}: archived segment does not decompress: {exc}",
                                     segment=seg.name, offset=0) from None

    def _continued_by(self, timeline: int, lsn: int | None) -> Timeline | None:
        """A timeline branching off `timeline` at or after commit `lsn` (it continues the history
        through that commit, so the commit was acknowledged), if any."""
        if lsn is None:
            return None
        return next((t for t in self.timelines.values()
                     if t.parent == timeline and t.timeline != timeline and t.branch_lsn >= lsn), None)

    def _damage(self, problem: Problem) -> None:
        self.problems.append(problem)
        if self.mode == "strict":
            where = f"LSN {problem.lsn}" if problem.lsn is not None else "unknown LSN"
            raise JournalCorrupt(f"{problem.segment} offset {problem.offset} ({where}): {problem.message}",
                                 segment=problem.segment, offset=problem.offset, lsn=problem.lsn)

    @property
    def active_timeline(self) -> int | None:
        return max(self.timelines) if self.timelines else None

    def lineage(self, timeline: int | None = None) -> list[Timeline]:
        """The timelines whose prefixes make up `timeline`'s history, root first."""
        t = self.active_timeline if timeline is None else timeline
        chain: list[Timeline] = []
        seen = set()
        while t and t in self.timelines and t not in seen:
            seen.add(t)
            chain.append(self.timelines[t])
            t = self.timelines[t].parent
        if t and t not in seen:
            raise JournalCorrupt(f"timeline {chain[-1].timeline} branches from timeline {t}, "
                                 "which has no segments", lsn=chain[-1].branch_lsn)
        return chain[::-1]

    # -- frames ------------------------------------------------------------------

    def segment_records(self, seg: Segment, *, last: bool, expect_lsn: int | None = None,
                        chain: int | None = None, start_lsn: int | None = None,
                        stop_lsn: int | None = None) -> Iterator[Record]:
        """Commits of one segment. `last`: damage at its end may be a torn tail.

        Only commits with `start_lsn <= lsn` are yielded (all are read and checked), and the
        scan ends at the first commit past `stop_lsn`. The generator's return value (for
        `yield from`) is `(LSN and chain of the last commit read before stopping, whether it
        stopped at stop_lsn, the last Record yielded)`; a plain for-loop ignores it."""
        lo = start_lsn if start_lsn is not None else -1
        hi = stop_lsn if stop_lsn is not None else float("inf")
        seen_lsn = seen_chain = yielded = None
        data = read_segment_bytes(seg)
        h = seg.header
        if expect_lsn is not None and h.first_lsn != expect_lsn:
            self._damage(Problem("gap", seg.name, 0, expect_lsn,
                                 f"segment starts at LSN {h.first_lsn}, expected {expect_lsn} "
                                 "(a segment is missing)", 0))
            if self.mode == "point_in_time":
                return seen_lsn, seen_chain, False, yielded
        if chain is not None and h.chain_seed != chain:
            self._damage(Problem("chain", seg.name, 0, h.first_lsn,
                                 f"segment chain seed {h.chain_seed:#010x} does not continue the "
                                 f"previous segment's chain {chain:#010x}", 0))
            if self.mode == "point_in_time":
                return seen_lsn, seen_chain, False, yielded
        chain = h.chain_seed
        lsn = h.first_lsn
        blobs: dict[bytes, bytes] = {}
        pos = fmt.HEADER_SIZE
        end = len(data)
        mv = memoryview(data)
        # fast path (the hot loop of every replay): a frame that is whole, verifies, chains on,
        # decodes and continues the LSNs is yielded here; anything else goes through the full
        # classification below, from the same offset (nothing is yielded before a frame passed)
        crc32, decode, new_record = zlib.crc32, commit_decoder.decode, tuple.__new__
        frame_header, record_length = fmt.FRAME_HEADER.unpack_from, fmt.RECORD_PREFIX.unpack_from
        hsize, psize, max_frame = fmt.FRAME_HEADER_SIZE, fmt.RECORD_PREFIX_SIZE, fmt.MAX_FRAME_BYTES
        name, timeline = seg.name, seg.timeline
        while pos < end:
            if chain is not None and lsn is not None and end - pos >= hsize:
                length, crc, frame_chain = frame_header(data, pos)
                body = pos + hsize
                stop = body + length
                if psize < length <= max_frame and stop <= end:
                    payload = mv[body:stop]
                    if crc32(payload) == crc and crc32(payload, chain) == frame_chain:
                        try:
                            if record_length(data, body)[0] == length - psize:  # one commit
                                commit = decode(mv[body + psize:stop])
                                batch = None if commit.lsn == lsn else ()
                            else:                                             # group commit
                                commit, batch = None, _split_frame(data, mv, body, stop, chain, lsn)
                        except (ValueError, msgspec.DecodeError):
                            batch = ()                  # classified below
                        if batch is None:
                            if lsn > hi:
                                return seen_lsn, seen_chain, True, yielded
                            if commit.blobs:
                                for b in commit.blobs:
                                    blobs[b.digest] = b.data
                            seen_lsn, seen_chain = lsn, frame_chain
                            if lsn >= lo:
                                yielded = new_record(Record, (commit, frame_chain, timeline, name, pos, blobs))
                                yield yielded
                            chain, lsn, pos = frame_chain, lsn + 1, stop
                            continue
                        if batch:
                            for commit, c in batch:
                                if commit.lsn > hi:
                                    return seen_lsn, seen_chain, True, yielded
                                for b in commit.blobs:
                                    blobs[b.digest] = b.data
                                seen_lsn, seen_chain = commit.lsn, c
                                if commit.lsn >= lo:
                                    yielded = new_record(Record, (commit, c, timeline, name, pos, blobs))
                                    yield yielded
                            chain, lsn, pos = frame_chain, lsn + len(batch), stop
                            continue
            bad = None
            if end - pos < fmt.FRAME_HEADER_SIZE:
                bad = f"frame header cut short ({end - pos} bytes left)"
            else:
                length, crc, frame_chain = fmt.decode_frame_header(data, pos)
                body = pos + fmt.FRAME_HEADER_SIZE
                if length == 0 or length > fmt.MAX_FRAME_BYTES:
                    bad = f"frame length {length} out of bounds"
                elif length > end - body:
                    bad = f"frame length {length} runs past the end of the file ({end - body} bytes left)"
                elif zlib.crc32(mv[body:body + length]) != crc:
                    bad = "frame checksum mismatch"
            if bad is not None:
                nxt = _next_intact_frame(data, pos + 1)
                child = self._continued_by(seg.timeline, lsn) if nxt is None and last else None
                if child is not None:
                    bad += (f"; timeline {child.timeline} branches off timeline {seg.timeline} at "
                            f"LSN {child.branch_lsn}, so the commits from LSN {lsn} on were "
                            "acknowledged: an acknowledged history lost frames, not a torn tail")
                elif nxt is None and last:
                    self.torn[seg.timeline] = TornTail(seg, pos, end)
                    self.problems.append(Problem("torn", seg.name, pos, lsn, f"torn tail: {bad}", end - pos))
                    return seen_lsn, seen_chain, False, yielded
                if nxt == UNDECIDED:
                    bad += ("; the bytes after it hold too many frame-like candidates to tell a "
                            "torn tail from damage, so it is treated as damage")
                    nxt = None
                self._damage(Problem("damaged", seg.name, pos, lsn, bad,
                                     (nxt if nxt is not None else end) - pos))
                if self.mode == "point_in_time" or nxt is None:
                    return seen_lsn, seen_chain, False, yielded
                # salvage: continue from the next intact frame; its chain cannot be checked
                pos = nxt
                length, crc, frame_chain = fmt.decode_frame_header(data, pos)
                chain = None
                lsn = None
                body = pos + fmt.FRAME_HEADER_SIZE
            try:
                records = fmt.split_records(mv[body:body + length])
                commits = [commit_decoder.decode(r) for r in records]
            except (ValueError, msgspec.DecodeError) as exc:
                self._damage(Problem("damaged", seg.name, pos, lsn,
                                     f"frame verifies but does not decode: {exc}", length + 12))
                if self.mode == "point_in_time":
                    return seen_lsn, seen_chain, False, yielded
                pos = body + length
                chain, lsn = frame_chain, None
                continue
            chains = []
            c = chain
            for r in records:
                c = fmt.chain_next(c, r) if c is not None else None
                chains.append(c)
            if chain is not None and c != frame_chain:
                self._damage(Problem("chain", seg.name, pos, lsn,
                                     f"frame does not continue the chain (stored {frame_chain:#010x}, "
                                     f"computed {c:#010x}): a frame is missing, stale or reordered",
                                     length + 12))
                if self.mode == "point_in_time":
                    return seen_lsn, seen_chain, False, yielded
            if lsn is not None and commits[0].lsn != lsn:
                self._damage(Problem("gap", seg.name, pos, lsn,
                                     f"frame starts at LSN {commits[0].lsn}, expected {lsn}", length + 12))
                if self.mode == "point_in_time":
                    return seen_lsn, seen_chain, False, yielded
            for i, commit in enumerate(commits):
                if i and commit.lsn != commits[i - 1].lsn + 1:
                    self._damage(Problem("gap", seg.name, pos, commits[i - 1].lsn + 1,
                                         f"commit LSN {commit.lsn} inside a frame does not follow "
                                         f"{commits[i - 1].lsn}", length + 12))
                    if self.mode == "point_in_time":
                        return seen_lsn, seen_chain, False, yielded
                if commit.lsn > hi:
                    return seen_lsn, seen_chain, True, yielded
                for b in commit.blobs:
                    blobs[b.digest] = b.data
                rec = Record(commit, chains[i] if chains[i] is not None else frame_chain,
                             seg.timeline, seg.name, pos, blobs)
                seen_lsn, seen_chain = commit.lsn, rec.chain
                if commit.lsn >= lo:
                    yielded = rec
                    yield rec
            chain = frame_chain
            lsn = commits[-1].lsn + 1
            pos = body + length
        return seen_lsn, seen_chain, False, yielded

    def timeline_records(self, timeline: int, *, start_lsn: int = 1,
                         stop_lsn: int | None = None) -> Iterator[Record]:
        """Commits written on one timeline (its own segments only), in LSN order."""
        tl = self.timelines[timeline]
        expect, chain = None, None
        segs = tl.segments
        first = 0
        for i, seg in enumerate(segs):  # skip segments wholly before start_lsn
            if i + 1 < len(segs) and segs[i + 1].first_lsn <= start_lsn:
                first = i + 1
        last_yielded = None  # returned, for `yield from` (records() checks branch points with it)
        for i in range(first, len(segs)):
            seg = segs[i]
            if stop_lsn is not None and seg.first_lsn > stop_lsn:
                return last_yielded
            last_lsn, last_chain, stopped, yielded = yield from self.segment_records(
                seg, last=i == len(segs) - 1, expect_lsn=expect, chain=chain, start_lsn=start_lsn,
                stop_lsn=stop_lsn)
            if yielded is not None:
                last_yielded = yielded
            if last_lsn is not None:
                chain = last_chain
            if stopped:
                return last_yielded
            if self.mode == "point_in_time" and self._stopped_in(seg):
                return last_yielded
            expect = (last_lsn + 1) if last_lsn is not None else seg.first_lsn
            if i + 1 < len(segs) and last_lsn is None and chain is None:
                chain = seg.header.chain_seed
        return last_yielded

    def _stopped_in(self, seg: Segment) -> bool:
        return any(p.segment == seg.name and p.kind != "torn" for p in self.problems)

    def records(self, *, timeline: int | None = None, start_lsn: int = 1,
                stop_lsn: int | None = None) -> Iterator[Record]:
        """Commits of the active history (or of `timeline`'s), following branch points."""
        lineage = self.lineage(timeline)
        for i, tl in enumerate(lineage):
            limit = lineage[i + 1].branch_lsn if i + 1 < len(lineage) else None
            hi = limit if stop_lsn is None else (stop_lsn if limit is None else min(limit, stop_lsn))
            if hi is not None and hi < start_lsn:
                continue
            lo = max(start_lsn, tl.branch_lsn + 1)
            last = yield from self.timeline_records(tl.timeline, start_lsn=lo, stop_lsn=hi)
            if i + 1 < len(lineage):
                child = lineage[i + 1]
                seed = child.segments[0].header.chain_seed
                reached = last.commit.lsn if last is not None else None
                if reached is not None and reached != child.branch_lsn and (stop_lsn is None or stop_lsn > reached):
                    self._damage(Problem("gap", child.segments[0].name, 0, child.branch_lsn,
                                         f"timeline {child.timeline} branches at LSN {child.branch_lsn}, "
                                         f"but timeline {tl.timeline} ends at LSN {reached}", 0))
                if last is not None and last.commit.lsn == child.branch_lsn and last.chain != seed:
                    self._damage(Problem("chain", child.segments[0].name, 0, child.branch_lsn,
                                         f"timeline {child.timeline} does not continue timeline "
                                         f"{tl.timeline}'s chain at LSN {child.branch_lsn}", 0))
            if stop_lsn is not None and hi is not None and hi >= stop_lsn:
                return

    def dead_tails(self) -> Iterator[tuple[int, int, Iterator[Record]]]:
        """(timeline, branch LSN, records) for each part of history no longer active:
        the commits a timeline wrote after a descendant branched off it."""
        active = {tl.timeline for tl in self.lineage()} if self.timelines else set()
        for t, tl in sorted(self.timelines.items()):
            children = [c for c in self.timelines.values() if c.parent == t]
            if t in active:
                on_path = [c for c in children if c.timeline in active]
                if not on_path:
                    continue
                cut = on_path[0].branch_lsn
            else:
                cut = tl.branch_lsn
            yield t, cut, self.timeline_records(t, start_lsn=cut + 1)

    def fold(self, *, stop_lsn: int | None = None, state: State | None = None,
             timeline: int | None = None, log=None) -> State:
        """The state of the active history (or `timeline`'s) after `stop_lsn` (default: the end).
        `log`: see `fold.fold_records` (each commit's own undo record, for going back)."""
        state = State() if state is None else state
        return fold_records(state, self.records(timeline=timeline, start_lsn=state.lsn + 1,
                                                stop_lsn=stop_lsn), log=log)

    def max_group_id(self) -> int:
        """The highest group id any timeline ever allocated (-1 if none): ids are never reused."""
        top = -1
        for t in self.timelines:
            for rec in self.timeline_records(t):
                for ev in rec.commit.events:
                    if type(ev) is Taken and ev.groups:
                        top = max(top, ev.groups[-1].group_id)
        return top


def open_reader(path: str, mode: str = "strict") -> Reader:
    return Reader(path, mode)
