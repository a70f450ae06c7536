"""Setting aside a damaged segment that a cut covers, so the history on disk can be continued.

A segment every commit of which, on the active history, is at or before the LSN of a cut (of
its state file, from which an open starts) is needed by no restore and no open: the cut holds
the state it led to. When such a segment is damaged, `Journal.open` moves it into `damaged/`
(never deleted), with every older segment of the active history (root first), so that what
stays on disk is the history after it, as if retention had retired its head: a hole in the
middle of the history would stop every reader that reads across it. A segment of a timeline
off the active history (a dead branch that left it at or before the cut) goes alone.

The moves go oldest first, each a rename into `damaged/` followed by an fsync of both
directories: a crash in between leaves a shorter head moved, the history on disk still whole
from its first segment on; the next open meets the damage again and moves the rest.
"""

from __future__ import annotations

import os

from . import history, layout
from .reader import Reader, Segment
from .vfs import OsFileSystem


def covered_segments(reader: Reader, name: str, lsn: int) -> list[Segment]:
    """The segments to move so that segment `name` leaves the journal: it and the active
    history before it, when every commit it holds on the active history is at or before
    `lsn`; it alone when its timeline is a dead branch that left the active history at or
    before `lsn`; [] when it is not covered (or not a segment of `reader`)."""
    seg = next((s for s in reader.segments if s.name == name), None)
    if seg is None:
        return []
    spans = history.spans(reader.timelines)
    at = next((i for i, sp in enumerate(spans) if sp.timeline.timeline == seg.timeline), None)
    if at is None:
        branch = next(b for b in history.dead_branches(reader.timelines) if b.timeline == seg.timeline)
        return [seg] if branch.divergence <= lsn else []
    tl, limit = spans[at]
    k = tl.segments.index(seg)
    last = tl.segments[k + 1].first_lsn - 1 if k + 1 < len(tl.segments) else None
    if limit is not None:
        last = limit if last is None else min(last, limit)
    if last is None or last > lsn:  # the tip's last segment, or history after the cut
        return []
    return [s for sp in spans[:at] for s in sp.timeline.segments] + tl.segments[:k + 1]


def move_aside(fs: OsFileSystem, journal_path: str, segments: list[Segment]) -> list[str]:
    """Move `segments` (oldest first) into `<journal>/damaged/`; the paths they went to. A name
    already taken there gets a numbered suffix: nothing set aside earlier is overwritten."""
    target = os.path.join(journal_path, layout.DAMAGED_DIR)
    fs.makedirs(target)
    moved = []
    for seg in segments:
        dest, n = os.path.join(target, seg.name), 1
        while os.path.lexists(dest):
            dest, n = os.path.join(target, f"{seg.name}.{n}"), n + 1
        fs.rename(seg.path, dest)
        fs.fsync_dir(target)
        fs.fsync_dir(journal_path)
        moved.append(dest)
    return moved
