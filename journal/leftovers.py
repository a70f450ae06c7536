"""Files a crash leaves behind: torn tails copied aside, and removing what is provably garbage.

Garbage is only what holds nothing that is not kept elsewhere, and belongs to no one alive:

* in `torn/` (written only by the writer, under its lock): an empty copy, and a copy whose
  bytes are a prefix of another copy of the same segment and offset (a duplicate made by an
  open that crashed, or failed, after copying and before truncating);
* an unpublished segment (`<segment>.wal.new`, writer lock held): a resume publishes the one it
  creates in the same open, so one on disk at an open is a resume's that crashed or failed (a
  full disk) before its first commit was durable;
* what a compaction that crashed left, removed only while the compaction lock is held (a
  running compaction's temporary files are not garbage): `snapshots/.tmp-*` directories (a
  cut being written or deleted), `*.wal.zst.tmp` (an archive being written), and a segment
  `X.wal` beside its archive `X.wal.zst` when the archive decompresses to exactly X.wal's
  bytes and X.wal is not the last segment of its timeline (retention stopped between
  publishing the archive and unlinking the segment).

Unknown files, cuts, `.replaced-*` cuts and archives without their segment are never touched.
Every directory changed is fsynced.
"""

from __future__ import annotations

import os
import time

from . import layout
from .errors import JournalCorrupt
from .reader import Segment, read_segment_bytes
from .vfs import OsFileSystem


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _torn_copies(torn_dir: str) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """(segment, offset) -> [(stamp, path)] of the regular files in `torn/` named as copies."""
    out: dict[tuple[str, int], list[tuple[int, str]]] = {}
    if not os.path.isdir(torn_dir):
        return out
    for name in sorted(os.listdir(torn_dir)):
        parsed = layout.parse_torn_copy_name(name)
        full = os.path.join(torn_dir, name)
        if parsed is not None and os.path.isfile(full) and not os.path.islink(full):
            out.setdefault(parsed[:2], []).append((parsed[2], full))
    return out


def copy_torn_tail(fs: OsFileSystem, journal_path: str, segment: str, offset: int,
                   tail: bytes) -> str | None:
    """Copy `tail`, the bytes of `segment` from `offset` on, into `torn/`; returns the copy's path.
    An empty tail needs no copy (None); an identical copy already there is not made again. A copy
    that fails is removed (best effort) before the error propagates."""
    if not tail:
        return None
    torn_dir = os.path.join(journal_path, layout.TORN_DIR)
    for _stamp, path in _torn_copies(torn_dir).get((segment, offset), ()):
        if os.path.getsize(path) == len(tail) and _read(path) == tail:
            return path
    fs.makedirs(torn_dir)
    aside = os.path.join(torn_dir, layout.torn_copy_name(segment, offset, int(time.time() * 1e6)))
    try:
        fs.write_file(aside, tail)
    except OSError:
        if os.path.lexists(aside):
            try:
                fs.unlink(aside)
                fs.fsync_dir(torn_dir)
            except OSError:
                pass  # the next open removes it: a copy that holds less than the tail it copies
        raise
    return aside


def remove_torn_garbage(fs: OsFileSystem, journal_path: str) -> list[str]:
    """Remove empty and duplicate copies from `torn/` (writer lock held); returns their paths."""
    torn_dir = os.path.join(journal_path, layout.TORN_DIR)
    removed = []
    for copies in _torn_copies(torn_dir).values():
        contents = [(_read(path), stamp, path) for stamp, path in copies]
        contents.sort(key=lambda c: (-len(c[0]), c[1]))  # longest first; the oldest of equals
        kept: list[bytes] = []
        for data, _stamp, path in contents:
            if not data or any(k.startswith(data) for k in kept):
                fs.unlink(path)
                removed.append(path)
            else:
                kept.append(data)
    if removed:
        fs.fsync_dir(torn_dir)
    return removed


def _archive_holds(archive: str, segment: str) -> bool:
    """Whether the archive at `archive` decompresses to exactly the bytes of `segment`."""
    parsed = layout.parse_segment_name(os.path.basename(archive))
    seg = Segment(archive, parsed[0], parsed[1], True, os.path.getsize(archive))
    try:
        return read_segment_bytes(seg) == _read(segment)
    except JournalCorrupt:
        return False


def remove_unpublished(fs: OsFileSystem, journal_path: str) -> list[str]:
    """Remove the unpublished segments a resume that did not finish left (writer lock held);
    returns their paths."""
    suffix = layout.SEGMENT_SUFFIX + layout.UNPUBLISHED_SUFFIX
    here = [os.path.join(journal_path, name) for name in sorted(os.listdir(journal_path))
            if name.endswith(suffix) and layout.parse_segment_name(name[:-len(layout.UNPUBLISHED_SUFFIX)])
            and os.path.isfile(os.path.join(journal_path, name))]
    for full in here:
        fs.unlink(full)
    if here:
        fs.fsync_dir(journal_path)
    return here


def remove_compaction_leftovers(fs: OsFileSystem, journal_path: str) -> list[str]:
    """Remove what a crashed compaction left (compaction lock held); returns the paths removed."""
    removed = []
    snapshots = os.path.join(journal_path, layout.SNAPSHOTS_DIR)
    if os.path.isdir(snapshots):
        for name in sorted(os.listdir(snapshots)):
            full = os.path.join(snapshots, name)
            if name.startswith(layout.TMP_PREFIX) and os.path.isdir(full) and not os.path.islink(full):
                fs.rmtree(full)
                removed.append(full)
        if removed:
            fs.fsync_dir(snapshots)
    names = set(os.listdir(journal_path))
    segments = [p for p in map(layout.parse_segment_name, names) if p is not None]
    here = []
    for name in sorted(names):
        full = os.path.join(journal_path, name)
        parsed = layout.parse_segment_name(name)
        if name.endswith(layout.ARCHIVE_TMP_SUFFIX) and os.path.isfile(full):
            here.append(full)
        elif (parsed is not None and not parsed[2] and layout.archive_name(name) in names
              and any(t == parsed[0] and lsn > parsed[1] for t, lsn, _ in segments)
              and _archive_holds(os.path.join(journal_path, layout.archive_name(name)), full)):
            here.append(full)
    for full in here:
        fs.unlink(full)
    if here:
        fs.fsync_dir(journal_path)
    return removed + here
