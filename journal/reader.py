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
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple

import msgspec
import zstandard

from . import format as fmt
from . import history, layout, position
from .errors import JournalCorrupt
from .events import Commit, commit_decoder
from .fold import fold_records
from .state import State
from .position import Position
from .scan import UNDECIDED, ProblemKind, frame_defect, next_intact_frame, read_frame, zero_fill

TORN, DAMAGED, CHAIN, GAP = ProblemKind.TORN, ProblemKind.DAMAGED, ProblemKind.CHAIN, ProblemKind.GAP

MODES = ("strict", "point_in_time", "salvage")


@dataclass
class Segment:
    """One segment file (live or archived) and what scanning it found. A header that a `Reader`
    left unread (`_read_header`: an archive inside its timeline, see `Reader._read_headers`) is
    read, and checked, on first use of `header`."""

    path: str
    timeline: int
    first_lsn: int
    archived: bool
    size: int
    _header: fmt.SegmentHeader | None = field(default=None, repr=False)
    _read_header: Callable[[], fmt.SegmentHeader | None] | None = field(default=None, repr=False, compare=False)

    @property
    def header(self) -> fmt.SegmentHeader | None:
        if self._read_header is not None:
            read, self._read_header = self._read_header, None
            self._header = read()
        return self._header

    @header.setter
    def header(self, h: fmt.SegmentHeader | None) -> None:
        self._header, self._read_header = h, None

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
    kind: ProblemKind
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


SEALED_ZEROS = (": a segment is cut to its frames when it is sealed, so commits of it are missing")


class TornTail(NamedTuple):
    segment: Segment
    offset: int   # first byte that is not part of a valid frame (the truncation point)
    size: int     # where its bytes end: the file size, or where the zeros after them start


def list_segments(path: str) -> list[Segment]:
    """Segments in `path` sorted by (timeline, first_lsn); a live file wins over its archive.

    Retention may run meanwhile (a compactor beside the writer and its shipper): a live
    segment retired after the directory was listed is listed as its archive when it was
    archived (the archive is durable before the segment is unlinked), else not at all, as
    a listing a moment later would."""
    found: dict[tuple[int, int], Segment] = {}
    for name in os.listdir(path):
        parsed = layout.parse_segment_name(name)
        if parsed is None:
            continue
        timeline, first_lsn, archived = parsed
        key = (timeline, first_lsn)
        if key in found and not found[key].archived:
            continue
        found_now = _stat_segment(path, name, archived)
        if found_now is not None:
            full, size, archived = found_now
            found[key] = Segment(full, timeline, first_lsn, archived, size)
    return [found[k] for k in sorted(found)]


def _stat_segment(path: str, name: str, archived: bool) -> tuple[str, int, bool] | None:
    """(path, size, archived) of segment file `name`, or of its archive once it is retired;
    None once it is gone."""
    candidates = [(name, archived)] if archived else [(name, False), (layout.archive_name(name), True)]
    for candidate, is_archive in candidates:
        full = os.path.join(path, candidate)
        try:
            return full, os.path.getsize(full), is_archive
        except FileNotFoundError:
            continue
    return None


def read_segment_bytes(seg: Segment) -> bytes:
    with open(seg.path, "rb") as f:
        data = f.read()
    if not seg.archived:
        return data
    # Stream it: `decompress()` allocates the content size the zstd frame header *claims*
    # up front (a 2 KB archive claiming 1.5 GiB allocated 1.5 GiB). Fed in small steps, the
    # output grows with the bytes that really come out, checked against the same bound. An
    # archive is one frame, or (since archives keep the header apart, see `_header_bytes`) the
    # header's frame and then the rest's: its content is that of its frames in order.
    limit = fmt.MAX_FRAME_BYTES * 2
    chunks, total, at, carry = [], 0, 0, b""
    try:
        dobj = zstandard.ZstdDecompressor().decompressobj()
        while carry or at < len(data):
            if carry:
                piece, carry = carry, b""
            else:
                piece, at = data[at:at + (1 << 12)], at + (1 << 12)
            out = dobj.decompress(piece)
            total += len(out)
            if total > limit:
                raise zstandard.ZstdError(f"decompresses to more than {limit} bytes")
            chunks.append(out)
            if dobj.eof and (dobj.unused_data or at < len(data)):  # the next frame
                carry = dobj.unused_data
                dobj = zstandard.ZstdDecompressor().decompressobj()
        if not dobj.eof:
            raise zstandard.ZstdError("the file ends inside its zstd frame")
    except zstandard.ZstdError as exc:
        raise JournalCorrupt(f"{seg.name}: archived segment does not decompress: {exc}",
                             segment=seg.name, offset=0) from None
    return b"".join(chunks)


ANY_LSN = 1 << 63  # `Reader.segment_records(skip_before=ANY_LSN)`: from the segment's last position
WINDOW_BYTES = 4 << 20  # a live segment is read this many bytes at a time (see _SegmentWindow)


class _SegmentWindow:
    """The bytes of one segment as its read needs them. A live segment is read a window at a
    time (WINDOW_BYTES, or one frame when it is larger), from offset `start`, so a read holds
    about a window however large the segment and reads no byte before `start`. An archive, and
    a live segment once one of its frames goes to the slow path (which reads around damage and
    classifies it against the end of the file), are held whole: `data` from offset 0, `at_eof`."""

    __slots__ = ("seg", "file", "data", "base", "at_eof")

    def __init__(self, seg: Segment, start: int = 0):
        self.seg, self.file, self.base = seg, None, 0  # data[0] is byte `base` of the segment
        if seg.archived:
            self.data, self.at_eof = read_segment_bytes(seg), True
            return
        # the file stays open until `close()`, so the slow path re-reads the same inode even
        # when compaction archives and unlinks the segment meanwhile
        self.file = open(seg.path, "rb")
        if start:
            self.file.seek(start)
            self.base = start
        self.data = self.file.read(WINDOW_BYTES)
        self.at_eof = len(self.data) < WINDOW_BYTES

    def move_to(self, pos: int) -> tuple[int, bool]:
        """Move the window on so that the frame at `pos` is whole in it: returns its position in
        the new window and True. When that cannot be (the frame was whole already: the fast path
        refused it; its length is out of bounds; it runs past the end of the file) the segment
        is loaded whole for the slow path: returns the frame's file offset and False."""
        at = self.base + pos
        if self.file is None:  # an archive: held whole already
            return at, False
        if not self.at_eof and self._read_on(pos):
            return 0, True
        self.file.seek(0)
        self.data, self.base, self.at_eof = self.file.read(), 0, True
        return at, False

    def _read_on(self, pos: int) -> bool:
        """Drop the bytes before `pos` and read on until the frame at `pos` is whole, or to the
        end of the file when the file ends exactly at `pos`; False when the frame cannot be."""
        data, at = self.data, self.base + pos
        left, hsize = len(data) - pos, fmt.FRAME_HEADER_SIZE
        size = os.fstat(self.file.fileno()).st_size
        if left == 0 and at == size:  # the history of this segment ends at a frame boundary
            self.data, self.base, self.at_eof = b"", at, True
            return True
        need = hsize
        if left >= hsize:
            length = fmt.FRAME_HEADER.unpack_from(data, pos)[0]
            if not fmt.RECORD_PREFIX_SIZE < length <= fmt.MAX_FRAME_BYTES or left >= hsize + length:
                return False
            need += length
        if at + need > size:
            return False
        want = max(WINDOW_BYTES, need) - left
        more = self.file.read(want)
        self.data, self.base = data[pos:] + more, at
        if len(more) < want:
            self.at_eof = True
        return len(self.data) >= need

    def zeros_to_end(self, pos: int) -> bool:
        """Whether every byte from `pos` (in the window) to the end of the file is zero: the
        preallocated rest of a live segment, checked a window at a time, the window kept."""
        if self.data.count(0, pos) != len(self.data) - pos:
            return False
        if self.at_eof:
            return True
        at = self.file.tell()
        try:
            while chunk := self.file.read(WINDOW_BYTES):
                if chunk.count(0) != len(chunk):
                    return False
            return True
        finally:
            self.file.seek(at)

    def size(self) -> int:
        return os.fstat(self.file.fileno()).st_size if self.file is not None else len(self.data)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class _SegmentBlobs(dict):
    """The blob table of a segment read from a position: the blobs stored after it, as they are
    read; a digest it lacks is looked up among the position's blobs (`known`: the loader state's
    there, content-addressed), and then, once, among those stored before it (`before()` reads
    them from the segment's header: only a loader state that goes back to an older blob needs
    that). Its keys are the blobs stored after the position only: a writer continuing the
    segment stores any other blob again rather than claim one the segment may not hold."""

    __slots__ = ("_before", "_known")

    def __init__(self, before, known: dict):
        super().__init__()
        self._before, self._known = before, known

    @property
    def known(self) -> dict:
        """The position's blobs (those stored after it are the table's keys)."""
        return self._known

    def _fill(self) -> bool:
        """Add the blobs stored before the position, once; whether they were added now."""
        if self._before is None:
            return False
        before, self._before = self._before, None
        for digest, data in before().items():
            self.setdefault(digest, data)
        return True

    def __bool__(self) -> bool:  # not empty while the blobs before the position are unread
        return self._before is not None or dict.__len__(self) > 0

    def __contains__(self, digest) -> bool:
        return (dict.__contains__(self, digest) or digest in self._known
                or (self._fill() and dict.__contains__(self, digest)))

    def __missing__(self, digest):
        if digest in self._known:
            return self._known[digest]
        if self._fill() and dict.__contains__(self, digest):
            return dict.__getitem__(self, digest)
        raise KeyError(digest)


class _SegmentEnd(NamedTuple):
    """How a read of one segment ended (the return value of `Reader.segment_records`)."""

    lsn: int | None       # LSN of the last commit read, None if none
    chain: int | None     # the chain after it
    at_stop: bool         # it stopped at the first commit past `stop_lsn`
    halted: bool          # the read mode ended the history at a fault of this segment
    last: Record | None   # the last Record yielded


class _Cursor:
    """Where the read of a segment is, handed to the helpers of its slow path."""

    __slots__ = ("pos", "chain", "lsn", "seen_lsn", "seen_chain", "yielded")

    def __init__(self, pos, chain, lsn, seen_lsn, seen_chain, yielded):
        self.pos, self.chain, self.lsn = pos, chain, lsn
        self.seen_lsn, self.seen_chain, self.yielded = seen_lsn, seen_chain, yielded


class Reader:
    """Read-only view of a journal directory. Takes no lock; safe beside a live writer.

    Scanning (what the bytes hold) is `scan.py`'s; here a fault is classified (`_classify`:
    torn tail or corruption) and the read mode is applied to it (`_apply_mode`), each in one
    place. The shape of the history (lineage, branch points, dead tails) is `history.py`'s."""

    def __init__(self, path: str, mode: str = "strict"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not os.path.isdir(path):
            raise FileNotFoundError(f"journal directory {path!r} does not exist")
        self.path = path
        self.mode = mode
        self.problems: list[Problem] = []
        self.torn: dict[str, TornTail] = {}  # segment path -> its torn tail, when one was found
        # segment path -> where its log ends in the zero-filled rest of a preallocated segment
        self.zero_tails: dict[str, TornTail] = {}
        self.segments = list_segments(path)
        self.run_id: bytes | None = None
        self.timelines: dict[int, Timeline] = {}
        self.positions = position.KnownPositions(path)  # where reading a segment may start
        # segment path -> the LSN its log ends with, once a read passed every frame of it
        self.ends: dict[str, int] = {}
        # segment path -> the frame the last read of it stopped in at `stop_lsn`, or ended with,
        # as a position without a group bound (`records_naming` goes on from there for a caller
        # that knows every commit before it)
        self.stops: dict[str, Position] = {}
        self._read_headers()

    # -- the two decisions: what a fault means, and whether reading goes on ------

    def _classify(self, seg: Segment, lsn: int | None, timelines, *, ends_timeline: bool,
                  after: int | None) -> tuple[ProblemKind, str]:
        """Torn tail or corruption, for bad bytes of a header or a frame of `seg` where commit
        `lsn` would start; returns the kind and what to add to the message.

        Torn only when the bytes end their timeline (`ends_timeline`: the last segment, and for
        a header one that looks unfinished), no intact frame follows them (`after` is None:
        frames are written only after the bytes before them were fsynced), and no timeline of
        `timelines` branches off at or after `lsn` (a branch continues the history through the
        commit, so lost frames under it are an acknowledged history damaged, not a torn tail).
        `after` UNDECIDED is damage: nothing is cut off on a guess."""
        if ends_timeline and after is None:
            child = history.continued_by(timelines, seg.timeline, lsn)
            if child is None:
                return TORN, ""
            return DAMAGED, (f"; timeline {child.timeline} branches off timeline {seg.timeline} at "
                             f"LSN {child.branch_lsn}, so the commits from LSN {lsn} on were "
                             "acknowledged: an acknowledged history lost frames, not a torn tail")
        if after == UNDECIDED:
            return DAMAGED, ("; the bytes after it hold too many frame-like candidates to tell a "
                             "torn tail from damage, so it is treated as damage")
        return DAMAGED, ""

    def _apply_mode(self, problem: Problem) -> bool:
        """Record `problem` and apply the read mode to it: whether reading goes on past it.
        A torn tail ends its timeline in every mode; damage raises JournalCorrupt (strict),
        ends the history (point_in_time) or is skipped (salvage)."""
        self.problems.append(problem)
        if problem.kind is TORN:
            return False
        if self.mode == "strict":
            where = f"LSN {problem.lsn}" if problem.lsn is not None else "unknown LSN"
            raise JournalCorrupt(f"{problem.segment} offset {problem.offset} ({where}): {problem.message}",
                                 segment=problem.segment, offset=problem.offset, lsn=problem.lsn)
        return self.mode == "salvage"

    # -- headers and timelines -------------------------------------------------

    def _read_headers(self) -> None:
        """Read and check the segments' headers; a segment whose header is bad is no part of the
        history (strict: JournalCorrupt). In strict mode an archive that is neither the first nor
        the last segment of its timeline is read on first use of its header instead (a bad one
        raises then): a restart reads the history after its cut, and the archives before it are
        sealed, so a reader does not open each of them (the first segment gives the timeline its
        parent, the last may end it torn: those are read here)."""
        kept = []
        dctx = zstandard.ZstdDecompressor()  # one for every archive's header
        by_timeline: dict[int, list[Segment]] = {}
        for seg in self.segments:
            by_timeline.setdefault(seg.timeline, []).append(seg)
        for timeline, segs in by_timeline.items():
            for i, seg in enumerate(segs):
                if self.mode == "strict" and seg.archived and 0 < i < len(segs) - 1:
                    seg._read_header = lambda seg=seg: self._checked_header(seg, dctx, last=False)
                    kept.append(seg)
                elif self._checked_header(seg, dctx, last=i == len(segs) - 1) is not None:
                    kept.append(seg)
        self.segments = sorted(kept, key=lambda s: (s.timeline, s.first_lsn))
        for seg in self.segments:
            tl = self.timelines.get(seg.timeline)
            if tl is None:
                tl = self.timelines[seg.timeline] = Timeline(
                    seg.timeline, seg.header.parent_timeline, seg.first_lsn - 1)
            tl.segments.append(seg)

    def _checked_header(self, seg: Segment, dctx: zstandard.ZstdDecompressor, *,
                        last: bool) -> fmt.SegmentHeader | None:
        """`seg`'s header once it decodes, agrees with the file name and is of this journal's run
        (the first read sets the run), else None with the problem recorded and the mode applied."""
        head = self._header_bytes(seg, dctx)
        try:
            h = seg.header = fmt.decode_header(head)
        except fmt.HeaderError as exc:
            self._bad_header(seg, head, exc, last=last)
            return None
        if (h.timeline, h.first_lsn) != (seg.timeline, seg.first_lsn):
            self._apply_mode(Problem(DAMAGED, seg.name, 0, seg.first_lsn,
                                     f"header says timeline {h.timeline} LSN {h.first_lsn}, "
                                     "the file name disagrees", fmt.HEADER_SIZE))
            return None
        if self.run_id is None:
            self.run_id = h.run_id
        elif h.run_id != self.run_id:
            self._apply_mode(Problem(DAMAGED, seg.name, 0, seg.first_lsn,
                                     f"segment belongs to run {h.run_id.hex()}, not "
                                     f"{self.run_id.hex()}", fmt.HEADER_SIZE))
            return None
        return h

    def _bad_header(self, seg: Segment, head: bytes, exc: fmt.HeaderError, *, last: bool) -> None:
        """A header that does not decode: torn (the segment was being created; a crash before the
        header's fsync can leave any bytes in a header-only file) or damage. Either way the
        segment is not part of the history."""
        unfinished = last and (len(head) < fmt.HEADER_SIZE or not any(head)
                               or (not seg.archived and seg.size <= fmt.HEADER_SIZE))
        after = next_intact_frame(read_segment_bytes(seg), fmt.HEADER_SIZE) if unfinished else None
        branches = self._claimed_timelines() if unfinished and after is None else {}
        kind, note = self._classify(seg, seg.first_lsn, branches, ends_timeline=unfinished, after=after)
        if kind is TORN:
            self.torn[seg.path] = TornTail(seg, 0, seg.size)
            self._apply_mode(Problem(TORN, seg.name, 0, seg.first_lsn,
                                     f"segment header incomplete ({exc})", seg.size))
        else:
            self._apply_mode(Problem(DAMAGED, seg.name, 0, seg.first_lsn,
                                     f"bad segment header: {exc}{note}", fmt.HEADER_SIZE))

    def _claimed_timelines(self) -> dict[int, Timeline]:
        """Each timeline's parent and branch point as its first readable header claims them
        (while the headers are being read, before `timelines` exists)."""
        claimed: dict[int, Timeline] = {}
        for seg in self.segments:
            if seg.timeline in claimed:
                continue
            try:
                h = fmt.decode_header(self._header_bytes(seg))
            except (fmt.HeaderError, JournalCorrupt):
                continue
            claimed[seg.timeline] = Timeline(seg.timeline, h.parent_timeline, seg.first_lsn - 1)
        return claimed

    @staticmethod
    def _header_bytes(seg: Segment, dctx: zstandard.ZstdDecompressor | None = None) -> bytes:
        """The first HEADER_SIZE bytes; an archive is decompressed only as far as that (its
        first frame, which holds the header alone in archives written since they keep it apart),
        with `dctx` when given (a decompressor costs more to make than a header frame to read)."""
        with open(seg.path, "rb") as f:
            if not seg.archived:
                return f.read(fmt.HEADER_SIZE)
            try:
                with (dctx or zstandard.ZstdDecompressor()).stream_reader(f, read_size=1 << 12) as z:
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

    @property
    def active_timeline(self) -> int | None:
        return history.active_timeline(self.timelines)

    def lineage(self, timeline: int | None = None) -> list[Timeline]:
        """The timelines whose prefixes make up `timeline`'s history, root first."""
        return history.lineage(self.timelines, timeline)

    def torn_tails(self) -> list[TornTail]:
        """Every torn tail and torn header. A torn header is found when the headers are read, a
        torn frame tail only by scanning the last segment of its timeline to its end, which this
        does (an archived segment is sealed: never torn). Damage raises as the mode says."""
        for tl in list(self.timelines.values()):
            last = tl.segments[-1]
            if not last.archived and last.path not in self.torn:
                for _ in self.segment_records(last, last=True, skip_before=ANY_LSN):
                    pass
        return list(self.torn.values())

    # -- positions (journal/position.py) -----------------------------------------

    def position_in(self, seg: Segment, lsn: int | None = None) -> Position | None:
        """The verified position of live segment `seg` nearest before commit `lsn` (the last
        one when None): reading its commits from `lsn` on may start there. None when it has
        none (an archive has none: it is decompressed whole)."""
        return None if seg.archived else self.positions.nearest(seg, lsn)

    def _blobs_before(self, seg: Segment, p: Position) -> dict:
        """The blob table of `seg` after its commits before position `p` (read from its header)."""
        table: dict = {}
        for rec in self.segment_records(seg, last=False, stop_lsn=p.lsn - 1):
            table = rec.blobs
        return dict(table)

    # -- frames ------------------------------------------------------------------

    def segment_records(self, seg: Segment, *, last: bool, expect_lsn: int | None = None,
                        chain: int | None = None, start_lsn: int | None = None,
                        stop_lsn: int | None = None, skip_before: int | None = None,
                        start_at: Position | None = None) -> Iterator[Record]:
        """Commits of one segment. `last`: damage at its end may be a torn tail.

        Only commits with `start_lsn <= lsn` are yielded, and the scan ends at the first commit
        past `stop_lsn`. Every commit read is checked; the read starts at the segment's nearest
        verified position at or before `start_lsn` (`position_in`), else at its header;
        `skip_before=L`: the caller wants no commit before the nearest position at or before
        LSN L either (`ANY_LSN`: before the segment's last position); `start_at`: start at this
        position instead (one of `stops`, for a caller that knows every commit before it).
        The generator's return value (for `yield from`) is a `_SegmentEnd`; a plain for-loop
        ignores it."""
        lo = start_lsn if start_lsn is not None else -1
        hi = stop_lsn if stop_lsn is not None else float("inf")
        seen_lsn = seen_chain = yielded = None
        frame_at = frame_lsn = frame_chain_before = None   # the last frame the fast path passed
        bound = lo if skip_before is None else max(lo, skip_before)
        at = start_at if start_at is not None else self.position_in(seg, bound) if bound > seg.first_lsn else None
        window = _SegmentWindow(seg, at.offset if at is not None else 0)
        try:
            if not self._segment_continues(seg, expect_lsn, chain):
                return _SegmentEnd(None, None, False, True, None)
            if at is None:
                chain, lsn, pos = seg.header.chain_seed, seg.header.first_lsn, fmt.HEADER_SIZE
                blobs: dict[bytes, bytes] = {}
            else:
                chain, lsn, pos = at.chain, at.lsn, at.offset
                blobs = _SegmentBlobs(lambda: self._blobs_before(seg, at), dict(at.blobs))
            data, base, at_eof = window.data, window.base, window.at_eof  # data[0] is byte `base` of the file
            pos, end, mv = pos - base, len(data), memoryview(data)
            # fast path (the hot loop of every replay): a frame that is whole, verifies, chains on
            # (fmt.frame_chain: one CRC over the payload), decodes and continues the LSNs is yielded
            # here; any other frame goes through `_frame_records`, from the same offset (nothing is
            # yielded before a frame passed)
            crc32, frame_chain_of, decode, new_record = zlib.crc32, fmt.frame_chain, commit_decoder.decode, tuple.__new__
            frame_header, record_length = fmt.FRAME_HEADER.unpack_from, fmt.RECORD_PREFIX.unpack_from
            hsize, psize, max_frame = fmt.FRAME_HEADER_SIZE, fmt.RECORD_PREFIX_SIZE, fmt.MAX_FRAME_BYTES
            name, timeline = seg.name, seg.timeline
            while pos < end or not at_eof:
                intact, start = False, 0
                if chain is not None and lsn is not None and end - pos >= hsize:
                    length, crc, frame_chain = frame_header(data, pos)
                    body = pos + hsize
                    stop = body + length
                    if psize < length <= max_frame and stop <= end:
                        payload = mv[body:stop]
                        intact = crc32(payload) == crc and frame_chain_of(payload, chain) == frame_chain
                        if intact and record_length(data, body)[0] == length - psize:  # one commit
                            try:
                                commit = decode(mv[body + psize:stop])
                            except (ValueError, msgspec.DecodeError):
                                commit = None                # read_frame reports it
                            if commit is not None and commit.lsn == lsn:
                                if lsn > hi:
                                    self._stopped(seg, base + pos, lsn, chain, blobs)
                                    return _SegmentEnd(seen_lsn, seen_chain, True, False, yielded)
                                if commit.blobs:
                                    for b in commit.blobs:
                                        blobs[b.digest] = b.data
                                seen_lsn, seen_chain = lsn, frame_chain
                                if lsn >= lo:
                                    yielded = new_record(Record, (commit, frame_chain, timeline, name, base + pos,
                                                              blobs))
                                    yield yielded
                                frame_at, frame_lsn, frame_chain_before = base + pos, lsn, chain
                                chain, lsn, pos = frame_chain, lsn + 1, stop
                                continue
                        elif intact:                                      # group commit
                            try:
                                commits, chains = fmt.decode_records(payload, decode, chain)
                            except (ValueError, msgspec.DecodeError):
                                commits, chains = (), ()     # read_frame reports it
                            expect = lsn
                            for commit, c in zip(commits, chains):
                                if commit.lsn != expect:
                                    break                    # from here on, read by _frame_records
                                if expect > hi:
                                    self._stopped(seg, base + pos, lsn, chain, blobs)
                                    return _SegmentEnd(seen_lsn, seen_chain, True, False, yielded)
                                for b in commit.blobs:
                                    blobs[b.digest] = b.data
                                seen_lsn, seen_chain = expect, c
                                if expect >= lo:
                                    yielded = new_record(Record, (commit, c, timeline, name, base + pos, blobs))
                                    yield yielded
                                expect += 1
                            else:
                                if commits:
                                    frame_at, frame_lsn, frame_chain_before = base + pos, lsn, chain
                                    chain, lsn, pos = frame_chain, expect, stop
                                    continue
                            start = expect - lsn
                if not at_eof or base:  # the frame is not whole in the window, or is for the slow path
                    # the zero-filled rest, told without loading the segment whole (damage goes
                    # to the slow path, which words it)
                    if not intact and window.zeros_to_end(pos) and \
                            self._zeros_end_log(seg, lsn, last, base + pos, window.size()) is None:
                        self._ended(seg, seen_lsn, frame_at, frame_lsn, frame_chain_before, blobs)
                        return _SegmentEnd(seen_lsn, seen_chain, False, False, yielded)
                    pos, moved = window.move_to(pos)
                    data, base, at_eof = window.data, window.base, window.at_eof
                    mv, end = memoryview(data), len(data)
                    if moved:
                        continue                 # nothing of the frame was yielded: read it again
                cur = _Cursor(pos, chain, lsn, seen_lsn, seen_chain, yielded)
                done = yield from self._frame_records(seg, data, cur, intact=intact, start=start, last=last,
                                                      lo=lo, hi=hi, blobs=blobs)
                if done is not None:
                    return done
                pos, chain, lsn, seen_lsn, seen_chain, yielded = (
                    cur.pos, cur.chain, cur.lsn, cur.seen_lsn, cur.seen_chain, cur.yielded)
            self._ended(seg, seen_lsn, frame_at, frame_lsn, frame_chain_before, blobs)
            return _SegmentEnd(seen_lsn, seen_chain, False, False, yielded)
        finally:
            window.close()

    def _stopped(self, seg: Segment, offset: int, lsn: int, chain: int, blobs: dict) -> None:
        """A read of `seg` stopped in (or ended with) the frame at `offset`, which starts with
        commit `lsn` after `chain`, the segment's blobs `blobs` read by then (`stops`)."""
        known = {**blobs.known, **blobs} if isinstance(blobs, _SegmentBlobs) else blobs
        self.stops[seg.path] = Position(seg.timeline, seg.first_lsn, offset, lsn, chain, 0,
                                        tuple(sorted(known.items())))

    def _ended(self, seg: Segment, lsn: int | None, frame_at: int | None, frame_lsn: int | None,
               frame_chain: int | None, blobs: dict) -> None:
        """A read passed every frame of `seg`: its log ends with commit `lsn` (`ends`), in the
        frame at `frame_at` (`stops`) when the fast path passed it."""
        if lsn is not None:
            self.ends[seg.path] = lsn
        if frame_at is not None:
            self._stopped(seg, frame_at, frame_lsn, frame_chain, blobs)

    def _segment_continues(self, seg: Segment, expect_lsn: int | None, chain: int | None) -> bool:
        """Check that `seg` starts at `expect_lsn` and continues `chain` (None: not checked);
        whether reading goes on into it."""
        h = seg.header
        if expect_lsn is not None and h.first_lsn != expect_lsn:
            if not self._apply_mode(Problem(GAP, seg.name, 0, expect_lsn,
                                            f"segment starts at LSN {h.first_lsn}, expected {expect_lsn} "
                                            "(a segment is missing)", 0)):
                return False
        if chain is not None and h.chain_seed != chain:
            if not self._apply_mode(Problem(CHAIN, seg.name, 0, h.first_lsn,
                                            f"segment chain seed {h.chain_seed:#010x} does not continue the "
                                            f"previous segment's chain {chain:#010x}", 0)):
                return False
        return True

    def _frame_records(self, seg: Segment, data: bytes, cur: "_Cursor", *, intact: bool, start: int,
                       last: bool, lo, hi, blobs: dict) -> Iterator[Record]:
        """The records of the frame at `cur.pos` from its commit `start` on (those before were
        yielded by the fast path), read in full (`intact`: its checksum and chain already
        verified), faults classified and the mode applied; `cur` moves past it. Returns a
        `_SegmentEnd` when the read of the segment ends here, else None."""
        if not intact:
            bad = frame_defect(data, cur.pos)
            if bad is not None:
                done = self._bad_frame(seg, data, cur, bad, last)
                if done is not None:
                    return done
        frame = read_frame(data, cur.pos, cur.chain, cur.lsn)
        commits, faults = frame.commits, [f for f in frame.faults if f[0] >= start]
        k = 0
        for i in range(start, len(commits) + 1):
            while k < len(faults) and faults[k][0] == i:
                f = faults[k][1]
                if not self._apply_mode(Problem(f.kind, seg.name, f.offset, f.lsn, f.message, f.length)):
                    return _SegmentEnd(cur.seen_lsn, cur.seen_chain, False, True, cur.yielded)
                k += 1
            if i == len(commits):
                break
            commit = commits[i]
            if commit.lsn > hi:
                return _SegmentEnd(cur.seen_lsn, cur.seen_chain, True, False, cur.yielded)
            for b in commit.blobs:
                blobs[b.digest] = b.data
            rec = Record(commit, frame.chains[i], seg.timeline, seg.name, cur.pos, blobs)
            cur.seen_lsn, cur.seen_chain = commit.lsn, rec.chain
            if commit.lsn >= lo:
                cur.yielded = rec
                yield rec
        cur.chain = frame.chain
        cur.lsn = commits[-1].lsn + 1 if commits else None
        cur.pos = frame.end
        return None

    def _zeros_end_log(self, seg: Segment, lsn: int | None, last: bool, offset: int, size: int) -> str | None:
        """Zeros from `offset` to the end (`size`) of `seg`, where commit `lsn` would start: the
        end of the log where a torn tail could be (the never written rest of a preallocated
        segment, recorded in `zero_tails`; None), else damage (what `_classify` adds to its
        message)."""
        kind, note = self._classify(seg, lsn, self.timelines, ends_timeline=last, after=None)
        if kind is TORN:
            self.zero_tails[seg.path] = TornTail(seg, offset, size)
            return None
        return note

    def _bad_frame(self, seg: Segment, data: bytes, cur: "_Cursor", bad: str, last: bool) -> _SegmentEnd | None:
        """Bytes at `cur.pos` that are no intact frame: classified and the mode applied. Returns
        the `_SegmentEnd` when the read ends here, else None with `cur` at the next intact frame
        (salvage: its chain and LSN cannot be checked)."""
        pos, end = cur.pos, len(data)
        zeros_end = zero_fill(data, pos)
        if zeros_end == end:
            note = self._zeros_end_log(seg, cur.lsn, last, pos, end)
            if note is None:
                return _SegmentEnd(cur.seen_lsn, cur.seen_chain, False, False, cur.yielded)
            after, kind = None, DAMAGED
            bad = f"the segment ends in {end - pos} zero bytes" + ("" if note else SEALED_ZEROS)
        else:
            after = next_intact_frame(data, pos + 1)
            kind, note = self._classify(seg, cur.lsn, self.timelines, ends_timeline=last, after=after)
            if zeros_end is not None:
                bad = f"zero-filled frame header followed by non-zero bytes at offset {zeros_end}"
        if kind is TORN:  # a torn frame over zeros: the zeros after it are the preallocated rest
            stop = len(data.rstrip(b"\0")) if data[-1] == 0 else end
            self.torn[seg.path] = TornTail(seg, pos, stop)
            self._apply_mode(Problem(TORN, seg.name, pos, cur.lsn, f"torn tail: {bad}", end - pos))
            return _SegmentEnd(cur.seen_lsn, cur.seen_chain, False, False, cur.yielded)
        after = None if after == UNDECIDED else after
        if not self._apply_mode(Problem(DAMAGED, seg.name, pos, cur.lsn, bad + note,
                                        (after if after is not None else end) - pos)):
            return _SegmentEnd(cur.seen_lsn, cur.seen_chain, False, True, cur.yielded)
        if after is None:
            return _SegmentEnd(cur.seen_lsn, cur.seen_chain, False, False, cur.yielded)
        cur.pos, cur.chain, cur.lsn = after, None, None
        return None

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
            done = yield from self.segment_records(
                seg, last=i == len(segs) - 1, expect_lsn=expect, chain=chain, start_lsn=start_lsn,
                stop_lsn=stop_lsn)
            if done.last is not None:
                last_yielded = done.last
            if done.lsn is not None:
                chain = done.chain
            if done.at_stop or done.halted:
                return last_yielded
            expect = (done.lsn + 1) if done.lsn is not None else seg.first_lsn
            if i + 1 < len(segs) and done.lsn is None and chain is None:
                chain = seg.header.chain_seed
        return last_yielded

    def records(self, *, timeline: int | None = None, start_lsn: int = 1,
                stop_lsn: int | None = None) -> Iterator[Record]:
        """Commits of the active history (or of `timeline`'s), following branch points."""
        line = history.spans(self.timelines, timeline)
        for i, (tl, limit) in enumerate(line):
            hi = limit if stop_lsn is None else (stop_lsn if limit is None else min(limit, stop_lsn))
            if hi is not None and hi < start_lsn:
                continue
            lo = max(start_lsn, tl.branch_lsn + 1)
            last = yield from self.timeline_records(tl.timeline, start_lsn=lo, stop_lsn=hi)
            if i + 1 < len(line) and not self._branch_continues(tl, line[i + 1].timeline, last, stop_lsn):
                return
            if stop_lsn is not None and hi is not None and hi >= stop_lsn:
                return

    def _branch_continues(self, parent: Timeline, child: Timeline, last: Record | None,
                          stop_lsn: int | None) -> bool:
        """Check that `child` continues `parent`'s history at its branch point (`last`: the last
        record read of the parent); whether reading goes on into the child."""
        seed = child.segments[0].header.chain_seed
        reached = last.commit.lsn if last is not None else None
        if reached is not None and reached != child.branch_lsn and (stop_lsn is None or stop_lsn > reached):
            if not self._apply_mode(Problem(GAP, child.segments[0].name, 0, child.branch_lsn,
                                            f"timeline {child.timeline} branches at LSN {child.branch_lsn}, "
                                            f"but timeline {parent.timeline} ends at LSN {reached}", 0)):
                return False
        if last is not None and last.commit.lsn == child.branch_lsn and last.chain != seed:
            if not self._apply_mode(Problem(CHAIN, child.segments[0].name, 0, child.branch_lsn,
                                            f"timeline {child.timeline} does not continue timeline "
                                            f"{parent.timeline}'s chain at LSN {child.branch_lsn}", 0)):
                return False
        return True

    def dead_tails(self) -> Iterator[tuple[int, int, Iterator[Record]]]:
        """(timeline, branch LSN, records) for each part of history no longer active:
        the commits a timeline wrote after a descendant branched off it."""
        for b in history.dead_branches(self.timelines):
            yield b.timeline, b.branch_lsn, self.timeline_records(b.timeline, start_lsn=b.branch_lsn + 1)

    def fold(self, *, stop_lsn: int | None = None, state: State | None = None,
             timeline: int | None = None, log=None) -> State:
        """The state of the active history (or `timeline`'s) after `stop_lsn` (default: the end).
        `log`: see `fold.fold_records` (each commit's own undo record, for going back)."""
        state = State() if state is None else state
        return fold_records(state, self.records(timeline=timeline, start_lsn=state.lsn + 1,
                                                stop_lsn=stop_lsn), log=log)
