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

from journal import JournalIOError, OsFileSystem, Reader, history, read_segment_bytes
from journal.layout import REPLACE_TMP_SUFFIX, archive_name
from journal.replica import shipped_filter

from .io_errors import io_step, remove_quietly

RETENTION_MODES = ("archive", "delete")
ARCHIVE_LEVEL = 3


def retirable_segments(reader: Reader, boundary_lsn: int) -> list:
    """Segments of the active history whose every commit is at or before `boundary_lsn`.

    The last segment of a timeline is never retired (it may still grow, or it
    holds a dead tail kept for forensics), nor, in a journal with a replica, a segment not
    yet in the bucket (`journal.replica.shipped_filter`)."""
    out = []
    for tl, limit in history.spans(reader.timelines):
        for seg, nxt in zip(tl.segments, tl.segments[1:]):
            last_lsn = nxt.first_lsn - 1
            if last_lsn <= boundary_lsn and (limit is None or last_lsn <= limit):
                out.append(seg)
    return shipped_filter(reader.path, out)


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
            data = zstandard.ZstdCompressor(level=ARCHIVE_LEVEL).compress(raw)
            final = os.path.join(journal_path, archive_name(seg.name))
            if zstandard.ZstdDecompressor().decompress(data) != raw:  # never unlink on a bad archive
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

