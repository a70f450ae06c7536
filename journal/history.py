"""The shape of a journal's history: which timelines are active, where each branch point is,
which commits are a dead tail, which timeline holds LSN n, and the checkpoint markers.

A timeline's own commits are those after its branch point (`branch_lsn`). The
active history is the newest timeline and its ancestors (its *lineage*), each
ancestor up to the branch point of the next one (its *limit*); everything a
timeline wrote after that limit, and every timeline off the lineage, is a dead
tail: kept readable, never folded into the state. Everything here works on the
`Reader.timelines` mapping (timeline -> `reader.Timeline`) and on `Record`s; it
reads no file.

Restore points are chosen here too (`restore_point`), from the checkpoint
markers: a `checkpoint_begun(S)` at LSN B followed by `checkpoint_committed(S)`
makes B the restore point of step S; the rule is the fold's (`fold.mark_checkpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

from .errors import OwnershipError
from .kinds import checkpoint_marks
from .rules import mark_checkpoint
from .state import State, latest_checkpoint


class Span(NamedTuple):
    """One timeline of a lineage and the part of it that is history: LSNs (branch_lsn, limit]."""

    timeline: object     # reader.Timeline
    limit: int | None    # the next timeline's branch point; None for the last one

    def holds(self, lsn: int) -> bool:
        return self.timeline.branch_lsn < lsn and (self.limit is None or lsn <= self.limit)


def active_timeline(timelines: Mapping) -> int | None:
    """The newest timeline: the tip of the active history (None when there is none)."""
    return max(timelines) if timelines else None


def lineage(timelines: Mapping, timeline: int | None = None) -> list:
    """The timelines whose prefixes make up `timeline`'s history (default: the active one),
    root first; [] when there are none. An ancestor with no segments on disk (its segments
    were set aside, `journal.set_aside`) ends the lineage: the history on disk starts in the
    oldest timeline that has segments, as when retention retired the head, and a restore or an
    open needs a cut at or after its start."""
    t = active_timeline(timelines) if timeline is None else timeline
    chain: list = []
    seen = set()
    while t and t in timelines and t not in seen:
        seen.add(t)
        chain.append(timelines[t])
        t = timelines[t].parent
    return chain[::-1]


def spans(timelines: Mapping, timeline: int | None = None) -> list[Span]:
    """The lineage of `timeline` (default: the active history), each with its limit."""
    line = lineage(timelines, timeline)
    return [Span(tl, line[i + 1].branch_lsn if i + 1 < len(line) else None) for i, tl in enumerate(line)]


def holder(timelines: Mapping, tip: int, lsn: int) -> int | None:
    """The timeline whose own commits include LSN `lsn` of `tip`'s history (None: below its root)."""
    t = tip
    while t in timelines and timelines[t].branch_lsn >= lsn:
        t = timelines[t].parent
    return t if t in timelines else None


def continued_by(timelines: Mapping, timeline: int, lsn: int | None):
    """A timeline branching off `timeline` at or after commit `lsn`, if any: it continues the
    history through that commit, so the commit was acknowledged (and cannot be a torn tail)."""
    if lsn is None:
        return None
    return next((t for t in timelines.values()
                 if t.parent == timeline and t.timeline != timeline and t.branch_lsn >= lsn), None)


@dataclass
class Branch:
    """A part of history that is no longer active (a dead tail) and where it left the active one."""

    timeline: int      # the timeline whose records these are
    branch_lsn: int    # its records after this LSN are dead
    divergence: int    # the last LSN it shares with the active history
    child: int | None  # the active timeline that branched at `branch_lsn`, when there is one


def dead_branches(timelines: Mapping) -> list[Branch]:
    """Every dead tail, by timeline: an active timeline's commits after the next one branched off
    it, and a whole timeline off the active lineage; with the LSN where it diverged."""
    line = spans(timelines) if timelines else []
    position = {s.timeline.timeline: i for i, s in enumerate(line)}
    limit = {s.timeline.timeline: s.limit for s in line}
    out = []
    for t, tl in sorted(timelines.items()):
        if t in position:
            i = position[t]
            if i + 1 < len(line):
                out.append(Branch(t, line[i].limit, line[i].limit, line[i + 1].timeline.timeline))
            continue
        x, p = tl.branch_lsn, tl.parent
        seen = set()
        while p and p not in position and p in timelines and p not in seen:
            seen.add(p)
            x = min(x, timelines[p].branch_lsn)
            p = timelines[p].parent
        lim = limit.get(p)
        out.append(Branch(t, tl.branch_lsn, x if lim is None else min(x, lim), None))
    return out


def checkpoint_markers(records: Iterable, state: State | None = None, *,
                       tolerant: bool = False) -> tuple[int, dict[int, int]]:
    """(last LSN, step -> checkpoint_begun LSN of every committed checkpoint) after folding only
    the checkpoint markers of `records` (journal `Record`s) onto `state`'s: the fold's checkpoint
    rule without the cost of the ownership fold, to find restore points. A marker the fold
    refuses raises its OwnershipError; `tolerant` (as a salvage fold) skips that commit instead."""
    pending = dict(state.pending_checkpoints) if state is not None else {}
    committed = dict(state.committed_checkpoints) if state is not None else {}
    end = state.lsn if state is not None else 0
    for rec in records:
        end = rec.commit.lsn
        marks = checkpoint_marks(rec.commit.events)
        if not marks:
            continue
        p, c = (dict(pending), dict(committed)) if tolerant else (pending, committed)
        try:
            for mark, step in marks:
                mark_checkpoint(p, c, mark, step, end)
        except OwnershipError:
            if not tolerant:
                raise
            continue
        pending, committed = p, c
    return end, committed


class NoSuchPoint(ValueError):
    """The point asked for is not on the history (a step never committed, an LSN past the end)."""


def restore_point(at: str | int, step: int | None, end: int,
                  committed: Mapping[int, int]) -> tuple[int, int | None]:
    """(LSN, checkpoint step or None) of the point `at` ("latest-checkpoint", "end", an LSN) or of
    the committed checkpoint of `step`, on a history ending at `end` whose committed checkpoints
    are `committed` (step -> checkpoint_begun LSN). The latest committed checkpoint of a
    history that has none is LSN 0. NoSuchPoint when the point is not on the history."""
    if step is not None:
        if step not in committed:
            raise NoSuchPoint(f"no committed checkpoint for step {step} on the active history "
                              f"(committed steps: {sorted(committed) or 'none'})")
        return committed[step], step
    if at == "latest-checkpoint":
        latest = latest_checkpoint(committed)
        return (latest[1], latest[0]) if latest is not None else (0, None)
    if at == "end":
        return end, None
    if not 0 <= at <= end:
        raise NoSuchPoint(f"LSN {at} is outside the active history (0..{end})")
    return at, next((s for s, lsn in committed.items() if lsn == at), None)
