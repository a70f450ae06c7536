"""Retention: which cuts to keep, and retiring segments that the oldest kept cut covers.

A retired segment is archived (zstandard, `<name>.wal.zst`, which the
journal's reader reads transparently) or deleted. Archiving writes the
archive under a temporary name, fsyncs it, renames it into place and fsyncs
the directory before the live segment is unlinked, so a crash at any step
leaves the segment readable from one file or the other.
"""

from __future__ import annotations

import os

import zstandard

from journal import OsFileSystem, Reader, read_segment_bytes
from journal.layout import archive_name

RETENTION_MODES = ("archive", "delete")
ARCHIVE_LEVEL = 3


def retirable_segments(reader: Reader, boundary_lsn: int) -> list:
    """Segments of the active history whose every commit is at or before `boundary_lsn`.

    The last segment of a timeline is never retired (it may still grow, or it
    holds a dead tail kept for forensics)."""
    out = []
    lineage = reader.lineage() if reader.timelines else []
    for i, tl in enumerate(lineage):
        limit = lineage[i + 1].branch_lsn if i + 1 < len(lineage) else None
        for seg, nxt in zip(tl.segments, tl.segments[1:]):
            last_lsn = nxt.first_lsn - 1
            if last_lsn <= boundary_lsn and (limit is None or last_lsn <= limit):
                out.append(seg)
    return out


def retire(fs: OsFileSystem, journal_path: str, segments: list, mode: str) -> list[str]:
    """Archive or delete `segments`; returns the names of the files written or removed."""
    if mode not in RETENTION_MODES:
        raise ValueError(f"retention must be one of {RETENTION_MODES}, not {mode!r}")
    done = []
    for seg in segments:
        if mode == "archive":
            if seg.archived:
                continue
            raw = read_segment_bytes(seg)
            data = zstandard.ZstdCompressor(level=ARCHIVE_LEVEL).compress(raw)
            if zstandard.ZstdDecompressor().decompress(data) != raw:  # never unlink on a bad archive
                raise OSError(f"{seg.path}: the zstd archive does not decompress to the segment")
            final = os.path.join(journal_path, archive_name(seg.name))
            fs.replace_file(final, data)  # via <final>.tmp: fsync, rename, directory fsync
            fs.unlink(seg.path)
            fs.fsync_dir(journal_path)
            done.append(os.path.basename(final))
        else:
            fs.unlink(seg.path)
            fs.fsync_dir(journal_path)
            done.append(seg.name)
    return done

