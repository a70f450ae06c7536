"""`replay.restores(path)`: every restore in a journal's history and what it cost, as the resumes
recorded it (`journal.Restored`, in each resume's first commit).

Every timeline is read, dead ones included: a restore whose own history died in a later crash
was a restore all the same. A history that branched without a record (a journal written before
restores were recorded, or a resume that abandoned nothing and kept nothing) is listed with
what its branch point alone says (`recorded` False). Segments that retention deleted are not
read: the restores recorded there are gone with them (archived ones are read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from journal import Reader, Restored

from .recovered_state import KeptWork
from .source import Source


@dataclass
class RestoreRow:
    """One restore: the history it began (`timeline`; `lsn`, the commit that recorded it),
    when, the point and checkpoint step it restored and the crash point it abandoned the
    history at, the lag bound it kept work within, what it kept (by lead), dropped (by reason)
    and handed back to generate, the generation seconds the dropped rows recorded. `active`:
    its history is (part of) the active one."""

    timeline: int
    lsn: int | None
    point: int
    crash_lsn: int | None
    step: int | None = None
    time: float | None = None
    max_policy_lag: int | None = None
    kept: dict[int, KeptWork] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    regenerate: int | None = None
    seconds_lost: float | None = None
    active: bool = False
    recorded: bool = True

    @classmethod
    def of(cls, event: Restored, timeline: int, lsn: int, active: bool) -> "RestoreRow":
        return cls(timeline, lsn, event.point, event.crash_lsn, event.step, event.time, event.max_policy_lag,
                   {k.lead: KeptWork(k.groups, k.rollouts, k.prefixes, k.tokens) for k in event.kept},
                   dict(event.dropped), event.regenerate, event.seconds_lost, active)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["kept"] = {lead: vars(w) for lead, w in self.kept.items()}
        return out


@dataclass
class RestoresReport:
    path: str
    restores: list[RestoreRow]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "restores": [r.to_dict() for r in self.restores]}


def restores(path: str, mode: str = "strict", *, replica_options: dict | None = None) -> RestoresReport:
    """Every restore in the history of the journal at `path` (a directory, or a replica URL
    with `replica_options`, read from the bucket alone), in the order the histories were
    written (timeline, then LSN). `mode`: the reader's (`journal.reader.MODES`)."""
    source = Source(path, replica_options)
    if source.location is not None:
        return source.report(restores, at_end=mode != "strict", mode=mode)
    reader = Reader(path, mode)
    on_active = _active_spans(reader)
    rows = []
    for t in sorted(reader.timelines):
        recorded_at_branch = False
        branch = reader.timelines[t].branch_lsn
        for rec in reader.timeline_records(t):
            for ev in rec.commit.events:
                if type(ev) is Restored:
                    rows.append(RestoreRow.of(ev, t, rec.commit.lsn, on_active(t, rec.commit.lsn)))
                    recorded_at_branch |= rec.commit.lsn == branch + 1
        if t != min(reader.timelines) and not recorded_at_branch:
            rows.append(RestoreRow(t, None, branch, None, active=on_active(t, branch + 1), recorded=False))
    rows.sort(key=lambda r: (r.timeline, r.lsn if r.lsn is not None else r.point))
    return RestoresReport(path, rows)


def _active_spans(reader: Reader):
    """Whether (timeline, LSN) is a commit of the active history."""
    lineage = reader.lineage() if reader.timelines else []
    upto = {tl.timeline: (lineage[i + 1].branch_lsn if i + 1 < len(lineage) else None)
            for i, tl in enumerate(lineage)}

    def active(timeline: int, lsn: int) -> bool:
        if timeline not in upto:
            return False
        end = upto[timeline]
        return end is None or lsn <= end
    return active
