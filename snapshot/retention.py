"""Retention: which cuts to keep, and retiring segments that the oldest kept cut covers.

A retired segment is archived (zstandard, `<name>.wal.zst`, which the
journal's reader reads transparently) or deleted. Archiving writes the
archive under a temporary name, fsyncs it, renames it into place and fsyncs
the directory before the live segment is unlinked, so a crash at any step
leaves the segment readable from one file or the other. An OS error is raised
as `journal.JournalIOError` (a partial `.wal.zst.tmp` is removed first).
"""

from __future__ import annotations

import os

import zstandard

from journal import JournalIOError, Reader, history
from journal.format import HEADER_SIZE
from journal.vfs import OsFileSystem
from journal.reader import read_segment_bytes
from journal.layout import REPLACE_TMP_SUFFIX, archive_name
from journal.replica.retention import shipped_filter

from .io_errors import io_step, remove_quietly

RETENTION_MODES = ("archive", "delete")
ARCHIVE_LEVEL = 3


def retirable_segments(reader: Reader, boundary_lsn: int) -> list:
    """The segments no kept cut needs, the oldest kept being at `boundary_lsn`: of the active
    history, those whose every commit on it is at or before the boundary, the last segment of
    a timeline a resume branched off at or before it included (what it holds after the branch
    point is a dead tail); and every segment of a dead branch (a timeline off the active
    history) that left it at or before the boundary. Archived, dead tails stay readable.

    Never the last segment of the newest timeline (it grows), nor, in a journal with a
    replica, a segment not yet in the bucket (`journal.replica.retention.shipped_filter`). In creation
    order (timeline, first LSN): a parent's segments go before its child's first one. Readers
    take a timeline's branch point from its first segment on disk, so deleted the other way
    round, a parent would be read past the real branch point into its dead tail; this way a
    deletion that stops half way leaves the history on disk starting later, never wrong."""
    out = []
    for tl, limit in history.spans(reader.timelines):
        for seg, nxt in zip(tl.segments, tl.segments[1:] + [None]):
            last_lsn = nxt.first_lsn - 1 if nxt is not None else limit  # None: the newest's last
            if limit is not None and last_lsn is not None:
                last_lsn = min(last_lsn, limit)
            if last_lsn is not None and last_lsn <= boundary_lsn:
                out.append(seg)
    out += [seg for b in history.dead_branches(reader.timelines)
            if b.child is None and b.divergence <= boundary_lsn for seg in reader.timelines[b.timeline].segments]
    return shipped_filter(reader.path, sorted(out, key=lambda s: (s.timeline, s.first_lsn)))


def retire(fs: OsFileSystem, journal_path: str, segments: list, mode: str) -> list[str]:
    """Archive or delete `segments`; returns the names of the files written or removed."""
    if mode not in RETENTION_MODES:
        raise ValueError(f"retention must be one of {RETENTION_MODES}, not {mode!r}")
    done = []
    for seg in segments:
        if mode == "archive":
            if seg.archived:
                continue
            with io_step("read the segment to archive", seg.path):
                raw = read_segment_bytes(seg)
            # the header in a zstd frame of its own: a reader gets it without decompressing the
            # segment (a reader reads the header of each archive it needs; one that
            # inspects, or checks marks, reads every archive's)
            parts = [raw[:HEADER_SIZE], raw[HEADER_SIZE:]]
            frames = [zstandard.ZstdCompressor(level=ARCHIVE_LEVEL).compress(part) for part in parts]
            data = b"".join(frames)
            final = os.path.join(journal_path, archive_name(seg.name))
            if [zstandard.ZstdDecompressor().decompress(f) for f in frames] != parts:  # never unlink on a bad archive
                raise JournalIOError(f"{final}: the zstd archive does not decompress to the segment "
                                     f"{seg.path}, which stays live", path=final,
                                     operation="verify the archive")
            with io_step("write the archive", final):
                try:
                    fs.replace_file(final, data)  # via <final>.tmp: fsync, rename, directory fsync
                except OSError:
                    remove_quietly(fs, final + REPLACE_TMP_SUFFIX)
                    raise
            with io_step("unlink the archived segment", seg.path):
                fs.unlink(seg.path)
                fs.fsync_dir(journal_path)
            done.append(os.path.basename(final))
        else:
            with io_step("delete the segment", seg.path):
                fs.unlink(seg.path)
                fs.fsync_dir(journal_path)
            done.append(seg.name)
    return done

