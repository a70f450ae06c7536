"""Walking a journal's histories for inspection: a fold that can tolerate damage, and where
each branch of history starts and leaves the active one.

`Fold` applies records with the journal's own `apply` (so the ownership rules
are the writer's). Strict, it raises on the first violation; tolerant (the
`salvage` mode), it skips a commit that cannot be applied, steps over LSN gaps
left by skipped frames, and records each skip in `skipped`.

Memory is the fold's: the live groups plus a byte per terminal group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import journal
from journal import Reader, Record, State, apply


class Skip(NamedTuple):
    lsn: int
    timeline: int
    segment: str
    offset: int
    message: str

    def text(self) -> str:
        return f"{self.segment} offset {self.offset} (LSN {self.lsn}): {self.message}"


class Fold:
    """A `State` being folded record by record."""

    def __init__(self, state: State | None = None, *, tolerant: bool = False):
        self.state = state if state is not None else State()
        self.tolerant = tolerant
        self.skipped: list[Skip] = []

    def add(self, rec: Record) -> bool:
        """Fold one record; False when tolerant and the commit was skipped."""
        state, commit = self.state, rec.commit
        if self.tolerant and commit.lsn != state.lsn + 1:
            if commit.lsn <= state.lsn:
                self.skipped.append(Skip(commit.lsn, rec.timeline, rec.segment, rec.offset,
                                         f"LSN {commit.lsn} repeats (history already at {state.lsn})"))
                return False
            self.skipped.append(Skip(commit.lsn, rec.timeline, rec.segment, rec.offset,
                                     f"LSNs {state.lsn + 1}..{commit.lsn - 1} are missing"))
            state.lsn = commit.lsn - 1
        try:
            apply(state, commit, chain=rec.chain, timeline=rec.timeline, blobs=rec.blobs)
        except (journal.OwnershipError, journal.JournalCorrupt) as exc:
            if not self.tolerant:
                raise
            self.skipped.append(Skip(commit.lsn, rec.timeline, rec.segment, rec.offset,
                                     f"commit not applied: {exc}"))
            state.lsn, state.chain, state.timeline = commit.lsn, rec.chain, rec.timeline
            return False
        return True


@dataclass
class Branch:
    """A part of history that is no longer active (a dead tail) and where it left the active one."""

    timeline: int      # the timeline whose records these are
    cut: int           # its records after this LSN are dead
    divergence: int    # the last LSN it shares with the active history
    child: int | None  # the active timeline that branched at `cut`, when there is one


def history(reader: Reader, **kw) -> Iterator[Record]:
    """`reader.records(**kw)`; in point_in_time mode the history ends at the first LSN that does
    not follow (the reader stops a timeline at its damage, but would go on with a later branch)."""
    records = reader.records(**kw)
    if reader.mode != "point_in_time":
        yield from records
        return
    last = None
    for rec in records:
        if last is not None and rec.commit.lsn != last + 1:
            return
        last = rec.commit.lsn
        yield rec


def active_lineage(reader: Reader) -> list:
    return reader.lineage() if reader.timelines else []


def dead_branches(reader: Reader) -> list[Branch]:
    """Every dead tail with the LSN at which it diverged from the active history."""
    lineage = active_lineage(reader)
    active = {tl.timeline: i for i, tl in enumerate(lineage)}
    limit = {tl.timeline: (lineage[i + 1].branch_lsn if i + 1 < len(lineage) else None)
             for i, tl in enumerate(lineage)}
    out = []
    for t, cut, _records in reader.dead_tails():
        if t in active:
            child = lineage[active[t] + 1].timeline
            out.append(Branch(t, cut, cut, child))
            continue
        x, p = cut, reader.timelines[t].parent
        seen = set()
        while p and p not in active and p in reader.timelines and p not in seen:
            seen.add(p)
            x = min(x, reader.timelines[p].branch_lsn)
            p = reader.timelines[p].parent
        lim = limit.get(p)
        div = x if lim is None else min(x, lim)
        out.append(Branch(t, cut, div, None))
    return out


def dead_records(reader: Reader, branch: Branch) -> Iterator[Record]:
    return reader.timeline_records(branch.timeline, start_lsn=branch.cut + 1)


def unique_problems(reader: Reader) -> list:
    """The reader's problems without repeats (a segment read twice reports its damage twice)."""
    seen, out = set(), []
    for p in reader.problems:
        key = (p.kind, p.segment, p.offset)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def event_name(event) -> str:
    return type(event).__struct_config__.tag


def kinds(events: Iterable) -> Iterator[str]:
    for ev in events:
        yield event_name(ev)
