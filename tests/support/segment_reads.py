"""What a test needs to say which segments an operation read, and what a read of every
segment of every timeline says (the references the group marks must agree with)."""

from __future__ import annotations

import journal.reader
from journal import Reader, Taken


def spy_segment_reads(monkeypatch) -> list[str]:
    """The names of the segments whose bytes are read from now on (in order, with repeats): a
    reader's pass over a segment (a window at a time, `journal.reader._SegmentWindow`), and
    every other read of a whole segment (`read_segment_bytes`)."""
    seen: list[str] = []
    real_read, window = journal.reader.read_segment_bytes, journal.reader._SegmentWindow

    def read(seg):
        seen.append(seg.name)
        return real_read(seg)

    class Window(window):
        def __init__(self, seg, start=0):
            if not seg.archived:  # an archive is read whole by read_segment_bytes, counted there
                seen.append(seg.name)
            super().__init__(seg, start)

    monkeypatch.setattr(journal.reader, "read_segment_bytes", read)
    monkeypatch.setattr(journal.reader, "_SegmentWindow", Window)
    return seen


def scan_max_group_id(r: Reader) -> int:
    """The highest group id any timeline's commits allocate, every commit read (-1 if none)."""
    return max((g.group_id for t in r.timelines for rec in r.timeline_records(t)
                for ev in rec.commit.events if type(ev) is Taken for g in ev.groups), default=-1)
