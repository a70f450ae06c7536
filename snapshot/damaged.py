"""The state at a point of a journal with damaged frames, from what the damage did not take.

`state_at` reads strictly: damage anywhere it reads stops it. A point's state needs less than
the whole journal: the commits after its base (the newest cut at or before it whose anchor is
on the active history, LSN 0 without one) up to the point. Damage before the base's anchor is
covered by the cut; damage after the point is a later part of the history. So here the journal
is read in `salvage` mode (damaged frames skipped and listed in `Reader.problems`) and a point
is restorable when no damage lies among the commits it needs (`needed_records`: the base's
anchor verified on the commit at its LSN, every commit after it chained on, no frame skipped
between them).

`point_past_damage` finds the point the caller asked for, and for the default (the latest
committed checkpoint) the newest committed checkpoint whose state does not need the damaged
frames. The checkpoint markers are read past the damage, so a checkpoint committed after it
is known; one whose state needs the damaged frames is passed over, and said so.

Group ids in a damaged frame are not known: `group_id_ceiling` counts one per damaged byte on
top of the highest id the readable frames and the segment headers show (each group a taken
event names takes more than a byte in its frame, and ids are allocated in order).
"""

from __future__ import annotations

from typing import Iterator

from journal import JournalCorrupt, Reader, Record, State
from journal.reader import ProblemKind
from journal.history import NoSuchPoint, checkpoint_markers, restore_point
from journal.ever import max_group_id
from journal.fold import fold_records

from .catalog import Skipped, anchor_check, anchored_cuts, newest_readable
from .cut import Cut
from .errors import JournalMismatch, RestoreError
from .state_at import Point


def damage_of(reader: Reader) -> list:
    """The damage `reader` met so far (torn tails are not damage: never acknowledged), once each."""
    seen, out = set(), []
    for p in reader.problems:
        if p.kind is not ProblemKind.TORN and (p.segment, p.offset) not in seen:
            seen.add((p.segment, p.offset))
            out.append(p)
    return out


def describe(problem) -> str:
    where = f"LSN {problem.lsn}" if problem.lsn is not None else "unknown LSN"
    return f"{problem.segment} offset {problem.offset} ({where}): {problem.kind}: {problem.message}"


def group_id_ceiling(reader: Reader) -> int:
    """The highest group id the journal can have allocated (see the module docstring)."""
    top = max_group_id(reader)
    return top + sum(p.length for p in damage_of(reader))


def needed_records(reader: Reader, anchor_lsn: int, anchor_chain: int,
                   stop_lsn: int | None) -> Iterator[Record]:
    """The commits after the anchor (`anchor_lsn`, `anchor_chain`; LSN 0: the empty state) up to
    `stop_lsn`, from a salvage `reader`; JournalCorrupt when damage lies among them or the
    commit at the anchor's LSN does not carry its chain. Damage before the anchor is passed."""
    seen = len(reader.problems)
    for rec in reader.records(start_lsn=max(anchor_lsn, 1), stop_lsn=stop_lsn):
        damage = [p for p in reader.problems[seen:] if p.kind is not ProblemKind.TORN]
        seen = len(reader.problems)
        lsn = rec.commit.lsn
        if lsn <= anchor_lsn:
            if lsn == anchor_lsn and rec.chain != anchor_chain:
                raise JournalCorrupt(f"{rec.segment} offset {rec.offset}: the commit at LSN {lsn} does "
                                     f"not carry the chain {anchor_chain:#010x} of the state there",
                                     segment=rec.segment, offset=rec.offset, lsn=lsn)
            continue
        if damage:
            p = damage[0]
            raise JournalCorrupt(f"{describe(p)}, among the commits after LSN {anchor_lsn} the state "
                                 "needs", segment=p.segment, offset=p.offset, lsn=p.lsn)
        yield rec


def state_needing(reader: Reader, base: Cut | None, lsn: int) -> State:
    """The state at `lsn`, folded from `base` (None: LSN 0) with `needed_records`."""
    state = base.state.copy() if base is not None else State()
    anchor = (base.lsn, base.manifest.chain) if base is not None else (0, 0)
    fold_records(state, needed_records(reader, *anchor, stop_lsn=lsn))
    if state.lsn != lsn:
        raise JournalCorrupt(f"{reader.path}: the commits readable after LSN {anchor[0]} end at LSN "
                             f"{state.lsn}, before LSN {lsn}", lsn=state.lsn + 1)
    return state


def point_past_damage(journal_path: str, at: str | int = "latest-checkpoint", *,
                      step: int | None = None, reader: Reader) -> tuple[Point, list[str]]:
    """`state_at` on a journal with damaged frames, read by the salvage `reader`: the point and
    what was passed over (checkpoints whose state needs damaged frames). JournalCorrupt when
    the point asked for (or, by default, every committed checkpoint) needs them."""
    skipped: list[Skipped] = []
    views = anchored_cuts(reader, journal_path, skipped)
    newest = newest_readable(views, None, skipped)
    end, committed = checkpoint_markers(
        reader.records(start_lsn=newest.lsn + 1 if newest is not None else 1),
        newest.state if newest is not None else None, tolerant=True)
    try:
        target, target_step = restore_point(at, step, end, committed)
    except NoSuchPoint as exc:
        raise RestoreError(f"{journal_path}: {exc}") from None
    candidates = [(target, target_step)]
    if step is None and at == "latest-checkpoint":  # then each older committed checkpoint
        candidates += sorted(((lsn, s) for s, lsn in committed.items() if lsn < target), reverse=True)
    passed: dict[str, list] = {}  # why -> the points passed over for it, newest first
    first = None                  # what stopped the point asked for
    for lsn, point_step in candidates:
        base = newest_readable(views, lsn, skipped)
        try:
            state = state_needing(reader, base, lsn)
        except JournalCorrupt as exc:
            passed.setdefault(str(exc), []).append((lsn, point_step))
            first = first or exc
            continue
        skipped += [Skipped(v.path, f"cut LSN {v.lsn} is after the restore point {lsn}")
                    for v in views if v.lsn > lsn and (base is None or v.path != base.path)]
        return Point(lsn, point_step, state, base, end, skipped, committed), _passed_over(passed)
    raise JournalCorrupt(f"{journal_path}: no point asked for can be restored without the damaged "
                         f"frames: {'; '.join(_passed_over(passed))}", segment=first.segment,
                         offset=first.offset, lsn=first.lsn)


def _passed_over(passed: dict[str, list]) -> list[str]:
    """One line per reason: the points it stopped (their steps, the newest's LSN)."""
    out = []
    for why, points in passed.items():
        steps = [s for _lsn, s in points if s is not None]
        what = (f"{len(points)} checkpoint(s) (steps {min(steps)}..{max(steps)}, the newest begun at "
                f"LSN {points[0][0]})" if len(steps) == len(points) else f"LSN {points[0][0]}")
        out.append(f"{what} cannot be restored: {why}")
    return out


def check_anchor_past_damage(reader: Reader, cut: Cut) -> list[str]:
    """Check `cut`'s anchor on its damaged journal (a salvage `reader`): JournalMismatch for a
    stale cut, as `check_anchor`; when the damage took the commit the anchor names, the check
    is skipped and the returned note says so."""
    found, problem = anchor_check(reader, cut)
    if problem is None:
        return []
    if found or not damage_of(reader):
        raise JournalMismatch(f"{cut.path}: {problem}")
    return [f"{cut.path}: its anchor (LSN {cut.lsn}) is not readable in the damaged journal, so it "
            "was not checked; the cut restores on its own"]
