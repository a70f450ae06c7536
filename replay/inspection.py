"""What inspection (verify, audit, `journal-inspect`) reads a journal with: a fold that can
tolerate damage, the bytes a scan reads, and progress over it. Which timelines are active
and where each dead tail leaves the active history is `journal.history`'s.

`Fold` hands each record to the journal's own fold (`fold_records`, so the
ownership rules are the writer's). Strict, it raises on the first violation;
tolerant (the `salvage` mode), it skips a commit that cannot be applied, steps
over LSN gaps left by skipped frames, and records each skip in `skipped`.

A scan reports progress to a `Bar` made by a `Progress` factory (label, total
bytes) - one bar per pass, its total the bytes of the segments that pass reads;
`tracked` advances it as records move from segment to segment. The library never
draws anything: the default factory, `no_progress`, makes bars that do nothing.

Memory is the fold's: the live groups plus a byte per terminal group.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Protocol

import journal
from journal import Reader, Record, State, history
from journal.fold import fold_records
from journal.kinds import event_name
from journal.history import Branch


class Skip(NamedTuple):
    lsn: int
    timeline: int
    segment: str
    offset: int
    message: str

    def text(self) -> str:
        return f"{self.segment} offset {self.offset} (LSN {self.lsn}): {self.message}"


class Fold:
    """A `State` being folded record by record: its callers act between two commits (count,
    tabulate, show), and tolerant it goes on past a commit `fold_records` refuses."""

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
            fold_records(state, (rec,))
        except (journal.OwnershipError, journal.JournalCorrupt) as exc:
            if not self.tolerant:
                raise
            self.skipped.append(Skip(commit.lsn, rec.timeline, rec.segment, rec.offset,
                                     f"commit not applied: {exc}"))
            state.lsn, state.chain, state.timeline = commit.lsn, rec.chain, rec.timeline
            return False
        return True

    def add_all(self, records: Iterable[Record]) -> None:
        """Fold every record: strict, in one `fold_records` call; tolerant, one by one."""
        if not self.tolerant:
            fold_records(self.state, records)
            return
        for rec in records:
            self.add(rec)


def active_lineage(reader: Reader) -> list:
    return history.lineage(reader.timelines)


def dead_branches(reader: Reader) -> list[Branch]:
    """Every dead tail with the LSN at which it diverged from the active history."""
    return history.dead_branches(reader.timelines)


def dead_records(reader: Reader, branch: Branch) -> Iterator[Record]:
    return reader.timeline_records(branch.timeline, start_lsn=branch.branch_lsn + 1)


class Bar(Protocol):
    def advance(self, nbytes: int, commits: int) -> None:
        """`nbytes` more bytes of the pass read, `commits` more records passed on."""

    def close(self) -> None: ...


Progress = Callable[[str, int], Bar]  # (label of the pass, bytes it reads) -> its bar


class _NoBar:
    def advance(self, nbytes: int, commits: int) -> None:
        pass

    def close(self) -> None:
        pass


NO_BAR = _NoBar()


def no_progress(label: str, total: int) -> Bar:
    return NO_BAR


def tracked(records: Iterable[Record], bar: Bar, sizes: Mapping[str, int]) -> Iterator[Record]:
    """Pass `records` through, advancing `bar` by the bytes and commits read (several scans
    may advance one bar)."""
    if bar is NO_BAR:
        yield from records
        return
    told = 0              # bytes already told to the bar
    done, current, n = 0, None, 0
    for rec in records:
        if rec.segment != current:
            if current is not None:
                done += sizes.get(current, 0)
            current = rec.segment
        n += 1
        if n == 256:
            at = done + min(rec.offset, sizes.get(current, 0))
            bar.advance(at - told, n)
            told, n = at, 0
        yield rec
    if current is not None:
        done += sizes.get(current, 0)
    bar.advance(done - told, n)


def span_bytes(reader: Reader, timeline: int, start_lsn: int, stop_lsn: int | None = None) -> int:
    """Bytes of the segments of `timeline` that hold its LSNs start_lsn..stop_lsn (what
    `reader.timeline_records` reads for them)."""
    segs = reader.timelines[timeline].segments
    first = 0
    for i in range(len(segs) - 1):
        if segs[i + 1].first_lsn <= start_lsn:
            first = i + 1
    return sum(s.size for s in segs[first:] if stop_lsn is None or s.first_lsn <= stop_lsn)


def history_bytes(reader: Reader, start_lsn: int = 1, stop_lsn: int | None = None, *,
                  timeline: int | None = None) -> int:
    """Bytes `reader.records(...)` reads on the active history (or on `timeline`'s)."""
    total = 0
    for tl, limit in history.spans(reader.timelines, timeline):
        hi = limit if stop_lsn is None else (stop_lsn if limit is None else min(limit, stop_lsn))
        lo = max(start_lsn, tl.branch_lsn + 1)
        if hi is None or hi >= lo:
            total += span_bytes(reader, tl.timeline, lo, hi)
    return total


def dead_bytes(reader: Reader, branches: list[Branch]) -> int:
    """Bytes `dead_records` reads over `branches`."""
    return sum(span_bytes(reader, b.timeline, b.branch_lsn + 1) for b in branches)


def unique_problems(reader: Reader) -> list:
    """The reader's problems without repeats (a segment read twice reports its damage twice)."""
    seen, out = set(), []
    for p in reader.problems:
        key = (p.kind, p.segment, p.offset)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def kinds(events: Iterable) -> Iterator[str]:
    for ev in events:
        yield event_name(ev)
