"""What every history of a journal ever did with group ids and attempts, read as cheaply as the
segments' group marks allow: the highest id allocated (`max_group_id`: ids are never reused),
the highest attempt each rollout was dispatched in (`attempts_used`, by its kind's `dispatched`),
the groups admitted (`admitted_groups`). A resume hands out ids and attempts above these, so no
worker of a dead run can seal into the new history.

A segment's header carries its group mark (`SegmentHeader.next_group_id`): the first id not yet
allocated when it was created. Only the segments that may name a group at or above a given id
are read (`segments_naming`), each from a cut's position when the caller knows what comes
before it (`records_naming`).
"""

from __future__ import annotations

from typing import Iterator

from . import history
from .events import Owner
from .kinds import KIND_OF
from .reader import ANY_LSN


def segments_naming(reader, group_id: int) -> Iterator:
    """The segments that may hold a commit naming group `group_id` or a higher one; only
    their records need reading, the others are known from the group marks alone.

    Segments are created one after another by one writer at a time: a timeline's next
    segment after its last-but-one, and a new timeline's first segment after every
    segment of the lower timelines. So the next-created segment's mark bounds every id a
    segment's commits can name (`SegmentHeader.group_mark`): a segment whose bound is at
    or below `group_id` names only lower ids, and so does every segment created before it
    (all their commits were written before the segment whose mark bounds it was created).
    So the walk goes from the newest segment back and stops at the first such bound: the
    headers of the older segments are not read (a strict reader reads an archive's header
    on first use). The newest segment and one whose bound was not recorded are always read."""
    created = [seg for t in sorted(reader.timelines) for seg in reader.timelines[t].segments]
    naming = []
    for i in range(len(created) - 1, -1, -1):
        bound = created[i + 1].header.next_group_id if i + 1 < len(created) else None
        if bound is not None and bound <= group_id:
            break
        naming.append(created[i])
    return reversed(naming)

def group_mark_top(reader) -> int:
    """The highest group id below every recorded group mark could cover (-1 if none): the mark
    of the newest segment that recorded one (marks never decrease in creation order, see
    `segments_naming`), so only the headers of the newest segments are read."""
    created = [seg for t in sorted(reader.timelines) for seg in reader.timelines[t].segments]
    mark = next((s.header.next_group_id for s in reversed(created) if s.header.next_group_id is not None), 0)
    return mark - 1

def records_naming(reader, group_id: int, skip_active_after: int | None = None, *,
                   any_position: bool = False, known_to: int | None = None) -> Iterator:
    """Commits of every segment that may name group `group_id` or a higher one
    (`segments_naming`), each segment read on its own (the checks of its frames and
    chain from its header, or from a position, on). With `skip_active_after=L`, the commits
    of the active history after LSN L are left out (the caller read them), and a segment
    holding only such commits is not read. Each segment is read from its last position with
    `any_position`; with `known_to=K` (the caller knows what the active history up to LSN K
    did), a segment of the active history from its nearest position at or before K that is
    on that history or from where a read of it stopped after K (`Reader.stops`), and not at
    all when a read of it already passed its every frame and ended at or before K
    (`Reader.ends`). What they say is `max_group_id`'s, `attempts_used`'s and
    `admitted_groups`'."""
    spans = {s.timeline.timeline: s for s in history.spans(reader.timelines)} \
        if skip_active_after is not None or known_to is not None else {}
    for seg in segments_naming(reader, group_id):
        tl = reader.timelines[seg.timeline]
        last = seg is tl.segments[-1]
        span = spans.get(seg.timeline)
        if span is not None and span.limit is None and skip_active_after is not None and (
                seg.first_lsn > skip_active_after or (known_to is not None and known_to >= skip_active_after)):
            continue  # the newest timeline's commits: after L left out, up to K known
        skip = ANY_LSN if any_position else None
        if span is not None and known_to is not None:
            skip = known_to if span.limit is None else min(known_to, span.limit)
            if reader.ends.get(seg.path, known_to + 1) <= skip:
                continue  # a read of it ended at or before K: nothing it holds is unknown
        stop = reader.stops.get(seg.path) if span is not None and known_to is not None else None
        start_at = stop if stop is not None and stop.lsn <= skip + 1 else None
        for rec in reader.segment_records(seg, last=last, skip_before=skip, start_at=start_at):
            if skip_active_after is None or span is None or rec.commit.lsn <= skip_active_after \
                    or not span.holds(rec.commit.lsn):
                yield rec


def max_group_id(reader) -> int:
    """The highest group id any timeline of `reader` (a `journal.Reader`) ever allocated (-1 if
    none): ids are never reused. At least that: a group mark counts ids that commits failed to
    make durable (never reused either). Reads the group marks of the headers and the records
    of the segments they do not cover (the newest one)."""
    top = floor = group_mark_top(reader)
    for seg in segments_naming(reader, floor + 1):  # read from their positions
        at = reader.position_in(seg)
        if at is not None:
            top = max(top, at.next_group_id - 1)
    for rec in records_naming(reader, floor + 1, any_position=True):
        for ev in rec.commit.events:
            rows = KIND_OF[type(ev)].takes(ev)
            if rows:
                top = max(top, rows[-1].group_id)
    return top


def attempts_used(reader, rollouts: set, *, skip_active_after: int | None = None,
                  known_to: int | None = None) -> dict[tuple[int, int], int]:
    """For each (group, index) of `rollouts` that any timeline of `reader` names: the highest
    attempt it was ever dispatched in (the kind's `dispatched`). Attempts are never reused, like
    group ids: a resume raises the attempt of an unsealed rollout above this, so no worker of
    a dead run can seal. Reads only the segments that may name the lowest of their groups
    (`Reader.records_naming`): those written since it was taken. `skip_active_after=L` leaves
    out the active history after LSN L (a caller that read it already counts it); `known_to=K`
    may leave out the active history up to LSN K (a caller whose state at K holds each
    rollout's attempt there: the segments are read from positions)."""
    used: dict[tuple[int, int], int] = {}
    if not rollouts:
        return used
    for rec in records_naming(reader, min(gid for gid, _ in rollouts), skip_active_after, known_to=known_to):
        for ev in rec.commit.events:
            kind = KIND_OF[type(ev)]
            for ref in kind.rollouts(ev):
                key = (ref.group_id, ref.index)
                if key in rollouts:
                    used[key] = max(used.get(key, 0), kind.dispatched(ref))
    return used


def admitted_groups(reader, groups: set, *, skip_active_after: int | None = None,
                    known_to: int | None = None) -> set[int]:
    """Which of `groups` any timeline of `reader` admitted: an admission dispatches attempt 0 of
    each of its rollouts, so a group some history admitted has an attempt 0 that a worker of
    that history may hold. Reads what `attempts_used` reads (`known_to=K`: groups waiting at
    LSN K of the active history, which it never admitted before K)."""
    found: set[int] = set()
    if not groups:
        return found
    for rec in records_naming(reader, min(groups), skip_active_after, known_to=known_to):
        for ev in rec.commit.events:
            kind = KIND_OF[type(ev)]
            if kind.moves_into is Owner.ADMITTED:
                found.update(gid for gid in kind.groups(ev) if gid in groups)
    return found
