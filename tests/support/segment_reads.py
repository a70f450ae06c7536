"""What a test needs to say which segments an operation read, and what a read of every
segment of every timeline says (the references the group marks must agree with)."""

from __future__ import annotations

import journal.reader
from journal import Reader, Taken


def spy_segment_reads(monkeypatch) -> list[str]:
    """The names of the segments whose bytes are read from now on (in order, with repeats)."""
    seen: list[str] = []
    real = journal.reader.read_segment_bytes

    def spy(seg):
        seen.append(seg.name)
        return real(seg)

    monkeypatch.setattr(journal.reader, "read_segment_bytes", spy)
    return seen


def scan_max_group_id(r: Reader) -> int:
    """The highest group id any timeline's commits allocate, every commit read (-1 if none)."""
    return max((g.group_id for t in r.timelines for rec in r.timeline_records(t)
                for ev in rec.commit.events if type(ev) is Taken for g in ev.groups), default=-1)
