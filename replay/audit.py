"""`audit(path)`: was every dataset row trained exactly once? Per loader epoch, on the active
history; returns an `AuditReport`.

A *row* is (epoch, task_name, idx): one row of one pass of the loader. Each
row taken on the active history ends up in exactly one class:

* trained once / trained more than once (a problem: listed with its groups);
* in flight: not trained, a group of it is live at the end (RESERVED, ADMITTED,
  REPLAY or SPARE);
* dropped: not trained, not live, its groups were discarded (by reason of the
  last discard); a group dropped and re-taken under a new id (a demoted group)
  counts by what became of the row, not of the group;
* lost (a problem: listed): taken, never trained, not dropped and not live.

Rows can also be lost *across* a restore: a row taken on a dead tail (after
the checkpoint the run resumed from) belongs to the loader again, which must
yield it anew. If the active history never took it again although the loader
has since moved past it, it is lost - the classic "dataloader checkpoint newer
than the ledger" bug. "Moved past it" means the resumed run has taken at least
as many new rows of that epoch as the dead tail had before this one (a loader
restored to the same state yields them in the same order), or has started a
later epoch. A row not reached yet is *pending*, not lost.

Per restore (per dead tail) the audit reports the work thrown away: rollouts
finished on the tail, how many of them the resume salvaged (finished again in
the resumed branch's first commit, under their own id or, adopted, under a new
one) and how many had to be regenerated, groups
trained on the tail (retrained after the resume) and groups taken there.

*In flight* (`AuditReport.in_flight`, `drained`): the groups live at the end of the active
history, taken and neither trained nor dropped, by owner; SPARE counts (a spare's row was
taken from the loader and never trained: a run that ends with spares discards them to be
drained). `sealed_not_finished` lists the ADMITTED groups whose rollouts are all sealed but
whose `finished` was never journaled: a restore finishes them (they come back to train).

For groups admitted with rollouts=N: the rollouts sealed, regenerated (sealed
at an attempt > 0), failed and abandoned by restores, and the violations of
"no rollout trained twice" and "a group with rollouts is trained with all N
sealed" (each one a problem). A fenced late result writes nothing, so it is
not counted (`FENCED_NOT_RECORDED`).

The counters live in a `snapshot.row_ledger.RowLedger`, which a cut carries
for the history before it: on a journal whose head was retired or that was
resumed from a cut, the audit starts from the oldest cut it needs
(`audit_base`) and lists in `not_covered` what no ledger counts.

Memory: the fold (live groups) plus a few bytes per row in dense per-(epoch,
task) tables indexed by idx; rows taken only on dead tails are kept in a dict
(bounded by the dead tails). Listing problem rows takes a second pass over the
active history (what of it is on disk), made only when there are problems.

An audit that could not read everything (frames skipped in salvage mode, a
point_in_time history that ends at damage before the end of the files, commits
salvage could not apply) lists what it missed in `not_covered` and is never
clean: a row in what was skipped may have been trained twice or lost.
"""

from __future__ import annotations

import os

from journal import Owner, Reader
from journal.kinds import KIND_OF, handlers
from journal.reader import ProblemKind
from snapshot import RestoreError, read_cut
from snapshot.catalog import anchor_problem
from journal.layout import cut_dirs
from snapshot.row_ledger import Bytes, RowLedger, Rows

from .cut_status import is_journal
from .reports import AuditReport, NotAJournal
from .source import Source
from .inspection import (Fold, Progress, active_lineage, dead_branches, dead_bytes, dead_records,
                   history_bytes, no_progress, tracked, unique_problems)

FENCED_NOT_RECORDED = ("fenced late results (seals of an attempt that was given up) are rejected "
                       "without writing anything to the journal, so the audit cannot count them")


class Base:
    """Where the audit starts: LSN 0, or a cut of the active history whose row ledger stands for
    the commits before it (when the journal's head was retired or it was resumed from a cut)."""

    def __init__(self, ledger: RowLedger | None, cut=None, not_covered: list[str] | None = None):
        self.ledger, self.cut = ledger, cut
        self.not_covered = not_covered or []

    @property
    def lsn(self) -> int:
        return self.cut.lsn if self.cut is not None else 0

    def fold(self, tolerant: bool) -> Fold:
        return Fold(self.cut.state.copy() if self.cut is not None else None, tolerant=tolerant)


def audit_base(reader: Reader, path: str) -> Base:
    """LSN 0 when the active history on disk starts at LSN 1; else the oldest cut under
    `<path>/snapshots` on the active history at or after the LSN before its first commit that
    has a row ledger, else the oldest such cut without one (the rows taken before it are then
    not covered), else nothing to stand on."""
    first = next(iter(reader.records()), None)
    if first is None or first.commit.lsn == 1:
        return Base(RowLedger())
    need = first.commit.lsn - 1
    fallback, passed = None, []
    for lsn, _timeline, cut_path in reversed(cut_dirs(path)):  # oldest first
        if lsn < need:
            continue
        try:
            cut = read_cut(cut_path)
            problem = anchor_problem(reader, cut)
            ledger = RowLedger.of_cut(cut) if problem is None else None
        except RestoreError as exc:
            passed.append(f"{cut_path}: {type(exc).__name__}: {exc}")
            continue
        if problem is not None:
            continue
        if ledger is not None:
            return Base(ledger, cut)
        fallback = fallback or cut
    retired = f"LSN 1..{need} (retired: the active history on disk starts at LSN {need + 1})"
    if fallback is not None:
        return Base(RowLedger.starting_at(fallback.state), fallback,
                    [f"{retired}: the cut {fallback.path} holds no row ledger (written before cuts "
                     f"carried one), so the rows taken up to LSN {fallback.lsn} are not audited"]
                    + passed)
    return Base(None, None, [f"{retired}: no usable cut at or after LSN {need} under "
                             f"{os.path.join(path, 'snapshots')}, so nothing is audited"] + passed)


class _Epochs(dict):
    """epoch -> its audit entry, made empty on first use."""

    def __missing__(self, epoch) -> dict:
        d = self[epoch] = {"epoch": epoch, "rows_taken": 0, "trained_once": 0, "trained_more": [],
                           "trained_more_count": 0, "in_flight": 0, "dropped": {}, "lost": [],
                           "lost_count": 0, "pending_retake": 0, "trained_and_live_again": []}
        return d


class Audit:
    def __init__(self, reader: Reader, base: Base):
        self.reader = reader
        self.base = base
        self.ledger = base.ledger if base.ledger is not None else RowLedger()
        self.sizes = {s.name: s.size for s in reader.segments}
        self.branches = dead_branches(self.reader)
        self.divs = sorted({b.divergence for b in self.branches})
        self.new_after: dict[int, dict] = {d: {} for d in self.divs}   # div -> epoch -> new rows taken
        self.max_epoch_after: dict[int, int | None] = {d: None for d in self.divs}
        # first LSN of a branch -> the groups finished there, and the rows of those it also took
        # (groups adopted from the dead tail, under new ids)
        self.first_commit_finished: dict[int, tuple[set[int], set[tuple]]] = {}
        self.dead_only: dict[tuple, tuple] = {}  # (epoch, task, idx) -> (timeline, lsn, gid, pos, div)
        self.fold = base.fold(tolerant=reader.mode == "salvage")
        self.first_lsn = None

    @property
    def tables(self) -> dict[tuple, Rows]:
        return self.ledger.tables

    # -- pass 1: the active history ------------------------------------------------------------

    def scan_active(self, progress: Progress) -> None:
        if self.base.ledger is None:
            return  # nothing to stand on (see `audit_base`)
        first_lsns = {b.branch_lsn + 1 for b in self.branches if b.child is not None}
        start = self.base.lsn + 1
        for lsn in sorted(x for x in first_lsns if x < start):  # before the base: read where kept
            for rec in self.reader.records(start_lsn=lsn, stop_lsn=lsn):
                self._first_commit(rec)
        bar = progress("audit: active history", history_bytes(self.reader, start))
        try:
            self._fold_active(tracked(self.reader.records(start_lsn=start), bar, self.sizes), first_lsns)
        finally:
            bar.close()

    def _first_commit(self, rec) -> None:
        """Note the groups the first commit of a resumed branch finished (what it salvaged), by
        id, and by row for the groups it took (adopted)."""
        finished, rows = self.first_commit_finished.setdefault(rec.commit.lsn, (set(), set()))
        taken = {}
        for ev in rec.commit.events:
            kind = KIND_OF[type(ev)]
            taken.update((g.group_id, (g.epoch, g.task_name, g.idx)) for g in kind.takes(ev))
            if kind.moves_into is Owner.REPLAY:
                gids = kind.groups(ev)
                finished.update(gids)
                rows.update(taken[gid] for gid in gids if gid in taken)

    def _fold_active(self, records, first_lsns: set[int]) -> None:
        fold, add = self.fold, self.ledger.add
        first_take = self._first_take if self.divs else None
        for rec in records:
            if self.first_lsn is None:
                self.first_lsn = rec.commit.lsn
            if rec.commit.lsn in first_lsns:
                self._first_commit(rec)
            if fold.add(rec):
                add(rec.commit, first_take)

    def _first_take(self, lsn: int, epoch) -> None:
        for d in self.divs:
            if lsn > d:
                na = self.new_after[d]
                na[epoch] = na.get(epoch, 0) + 1
                if epoch is not None and (self.max_epoch_after[d] is None or epoch > self.max_epoch_after[d]):
                    self.max_epoch_after[d] = epoch

    # -- pass 2: dead tails ----------------------------------------------------------------------

    def scan_dead(self, progress: Progress) -> list[dict]:
        bar = progress("audit: dead tails", dead_bytes(self.reader, self.branches))
        try:
            return [self._dead_tail(b, tracked(dead_records(self.reader, b), bar, self.sizes))
                    for b in self.branches]
        finally:
            bar.close()

    def _dead_tail(self, b, records) -> dict:
        st = {"timeline": b.timeline, "restored_at_lsn": b.branch_lsn, "diverged_at_lsn": b.divergence,
              "resumed_on_timeline": b.child, "first_lsn": None, "last_lsn": None, "commits": 0,
              "taken": 0, "admitted": 0, "finished": 0, "salvaged": None, "regenerated": None,
              "trained": 0, "discarded": 0}
        finished: set[int] = set()
        rows: dict[int, tuple] = {}  # group id -> row, of the groups the tail took
        pos: dict = {}
        for rec in records:
            lsn = rec.commit.lsn
            st["commits"] += 1
            st["first_lsn"] = st["first_lsn"] or lsn
            st["last_lsn"] = lsn
            for ev in rec.commit.events:
                kind = KIND_OF[type(ev)]
                counted = _TAIL_COUNTS.get(type(ev))
                if counted is not None:
                    st[counted] += len(kind.groups(ev))
                for g in kind.takes(ev):
                    p = pos.get(g.epoch, 0)
                    pos[g.epoch] = p + 1
                    row = rows[g.group_id] = (g.epoch, g.task_name, g.idx)
                    tab = self.tables.get((g.epoch, g.task_name))
                    if (tab is None or tab.taken.get(g.idx) == 0) and row not in self.dead_only:
                        self.dead_only[row] = (b.timeline, lsn, g.group_id, p, b.divergence)
                if kind.moves_into is Owner.REPLAY:
                    finished.update(kind.groups(ev))
        first = self.first_commit_finished.get(b.branch_lsn + 1)
        if b.child is not None and first is not None:  # (None: that commit was retired)
            ids, adopted_rows = first
            salvaged = {gid for gid in finished if gid in ids or rows.get(gid) in adopted_rows}
            st["salvaged"] = len(salvaged)
            st["regenerated"] = len(finished) - len(salvaged)
        return st

    # -- classification ------------------------------------------------------------------------------

    def classify(self) -> dict:
        live_rows: dict[tuple, int] = {}  # (epoch, task, idx) -> live groups holding the row
        for g in self.fold.state.live.values():
            key = (g.epoch, g.task_name, g.idx)
            live_rows[key] = live_rows.get(key, 0) + 1
        epochs = _Epochs()
        self._classify_active(epochs, live_rows)
        self._classify_live_again(epochs, live_rows)
        unknown = self._classify_dead_only(epochs)
        order = sorted(epochs, key=lambda e: (e is None, e if e is not None else 0))
        self.base.not_covered += [
            f"{n} row(s) taken only on the dead tail of timeline {tl}, which left the active history "
            f"at LSN {div}, before the audit's base cut at LSN {self.base.lsn}: whether the resumed "
            "run took them again in time is not known (neither lost nor pending is counted)"
            for (tl, div), n in sorted(unknown.items())]
        return {"epochs": [epochs[e] for e in order]}

    def _classify_active(self, epochs: "_Epochs", live_rows: dict[tuple, int]) -> None:
        """Each row the active history took: trained once or more, in flight, dropped, or lost."""
        for (epoch, task), rows in self.tables.items():
            d = epochs[epoch]
            plain, other = _rows_of(rows)
            d["rows_taken"] += plain
            d["trained_once"] += plain
            for idx, taken, trained, dropped in other:
                d["rows_taken"] += 1
                row = {"epoch": epoch, "task_name": task, "idx": idx}
                if trained == 1:
                    d["trained_once"] += 1
                elif trained >= 2:
                    d["trained_more_count"] += 1
                    d["trained_more"].append({**row, "times": trained})
                if trained:
                    continue
                if live_rows.get((epoch, task, idx)):
                    d["in_flight"] += 1
                elif dropped:
                    reason = self.ledger.reason_of(dropped)
                    d["dropped"][reason] = d["dropped"].get(reason, 0) + 1
                else:
                    d["lost_count"] += 1
                    d["lost"].append({**row, "where": "active history",
                                      "why": "taken, never trained, not dropped, not live"})

    def _classify_live_again(self, epochs: "_Epochs", live_rows: dict[tuple, int]) -> None:
        """Rows trained already and held by a live group again."""
        for (epoch, task, idx), live in sorted(live_rows.items(), key=lambda kv: repr(kv[0])):
            tab = self.tables.get((epoch, task))
            if tab is not None and tab.trained.get(idx):
                epochs[epoch]["trained_and_live_again"].append(
                    {"epoch": epoch, "task_name": task, "idx": idx, "live_groups": live})

    def _classify_dead_only(self, epochs: "_Epochs") -> dict[tuple[int, int], int]:
        """Rows only a dead tail took: pending a retake, or lost once the resumed run moved past
        them; returns (timeline, divergence) -> rows that left before the base (neither)."""
        unknown: dict[tuple[int, int], int] = {}
        for (epoch, task, idx), (tl, lsn, gid, p, div) in self.dead_only.items():
            d = epochs[epoch]
            d["rows_taken"] += 1
            if div < self.base.lsn:
                unknown[(tl, div)] = unknown.get((tl, div), 0) + 1
                continue
            n_new = self.new_after.get(div, {}).get(epoch, 0)
            later = self.max_epoch_after.get(div)
            overdue = n_new > p or (epoch is not None and later is not None and later > epoch)
            if not overdue:
                d["pending_retake"] += 1
                continue
            d["lost_count"] += 1
            why = (f"taken as group {gid} at LSN {lsn} on the dead tail of timeline {tl}; the resumed "
                   + (f"run started epoch {later}" if later is not None and epoch is not None and later > epoch
                      else f"run took {n_new} new row(s) of this epoch since LSN {div} but not this one "
                           f"(the dead tail had taken it as its new row #{p + 1})"))
            d["lost"].append({"epoch": epoch, "task_name": task, "idx": idx, "where": "dead tail",
                              "timeline": tl, "lsn": lsn, "group_id": gid, "why": why})
        return unknown

    # -- pass 3 (only with problems): which groups made the problem rows ---------------------------

    def details(self, epochs: list[dict], progress: Progress) -> None:
        want = {}
        for d in epochs:
            for r in d["trained_more"] + d["lost"] + d["trained_and_live_again"]:
                if r.get("where") == "dead tail":
                    continue
                want.setdefault((r["epoch"], r["task_name"], r["idx"]), []).append(r)
        if not want:
            return
        bar = progress("audit: problem rows", history_bytes(self.reader))
        try:
            self._details(want, tracked(self.reader.records(), bar, self.sizes))
        finally:
            bar.close()

    @staticmethod
    def _details(want: dict, records) -> None:
        rowof: dict[int, tuple] = {}
        for rec in records:
            lsn = rec.commit.lsn
            for ev in rec.commit.events:
                kind = KIND_OF[type(ev)]
                for g in kind.takes(ev):
                    key = (g.epoch, g.task_name, g.idx)
                    if key in want:
                        rowof[g.group_id] = key
                        for r in want[key]:
                            r.setdefault("groups", []).append(
                                {"group_id": g.group_id, "taken_lsn": lsn, "timeline": rec.timeline})
                end = _ENDS.get(type(ev))
                for gid in kind.groups(ev) if end is not None else ():
                    key = rowof.get(gid)
                    if key is None:
                        continue
                    for r in want[key]:
                        for g in r["groups"]:
                            if g["group_id"] == gid:
                                g.update(end(ev, lsn))


# what a dead tail's report counts: the groups these kinds named there, by kind
_TAIL_COUNTS = handlers({name: name for name in ("taken", "admitted", "finished", "trained", "discarded")})
# what a problem row's group says of how it left the live set, by the kind that moved it
_ENDS = handlers({"trained": lambda ev, lsn: {"trained_step": ev.step, "trained_lsn": lsn},
                  "discarded": lambda ev, lsn: {"dropped_reason": ev.reason, "dropped_lsn": lsn}})


_NONZERO = bytes([0] + [1] * 255)              # byte -> 1 if the counter is set
_EXACTLY_ONE = bytes(int(v == 1) for v in range(256))


def _flags(b: Bytes, table: bytes, n: int) -> int:
    """The dense counters mapped through `table` to one 0/1 byte each, as one integer: bitwise
    operations on two such integers act on the rows one by one."""
    return int.from_bytes(bytes(b.dense).translate(table).ljust(n, b"\0"), "little")


def _rows_of(rows: Rows) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(rows taken and trained exactly once, [(idx, taken, trained, dropped) of every other row
    with a counter set]); over the dense tables a byte per row at a time, then the sparse outliers."""
    plain, other = 0, []
    n = max(len(rows.taken.dense), len(rows.trained.dense), len(rows.dropped.dense))
    if n:
        taken = _flags(rows.taken, _NONZERO, n)
        once = taken & _flags(rows.trained, _EXACTLY_ONE, n)
        plain = bin(once).count("1")
        rest = (taken ^ once).to_bytes(n, "little")  # taken, not trained exactly once
        i = rest.find(1)
        while i >= 0:
            other.append((i, rows.taken.get(i), rows.trained.get(i), rows.dropped.get(i)))
            i = rest.find(1, i + 1)
    for i in sorted(set(rows.taken.sparse) | set(rows.trained.sparse) | set(rows.dropped.sparse)):
        t, tr, dr = rows.taken.sparse.get(i, 0), rows.trained.sparse.get(i, 0), rows.dropped.sparse.get(i, 0)
        if t and tr == 1:
            plain += 1
        elif t:
            other.append((i, t, tr, dr))
    return plain, other


def audit(path: str, mode: str = "strict", *, progress: Progress = no_progress,
          reader: Reader | None = None, replica_options: dict | None = None) -> AuditReport:
    """The exactly-once audit of the journal at `path`, read in `mode` (see `journal.reader.MODES`).
    Strict mode raises on damage; the other modes read what they can and list the rest in
    `not_covered`. `progress(label, total_bytes)` makes one bar per pass; `reader`: an open
    reader of `path` to use. A replica URL (with `replica_options`) is audited from the
    bucket alone."""
    source = Source(path, replica_options)
    if source.location is not None:
        return source.report(audit, at_end=mode != "strict", mode=mode, progress=progress)
    if reader is None:
        if not os.path.isdir(path) or not is_journal(path):
            raise NotAJournal(f"{path}: not a journal directory (no segment files *.wal or "
                              "*.wal.zst, no snapshots/)")
        reader = Reader(path, mode)
    a = Audit(reader, audit_base(reader, path))
    a.scan_active(progress)
    tails = a.scan_dead(progress)
    result = a.classify()
    if any(d["trained_more_count"] + d["lost_count"] for d in result["epochs"]):
        a.details(result["epochs"], progress)
    lineage = active_lineage(reader)
    totals = {k: sum(d[k] for d in result["epochs"]) for k in
              ("rows_taken", "trained_once", "trained_more_count", "in_flight", "lost_count", "pending_retake")}
    totals["dropped"] = sum(sum(d["dropped"].values()) for d in result["epochs"])
    problems = unique_problems(reader)
    ledger = a.ledger
    return AuditReport(
        path=os.path.abspath(path), mode=reader.mode,
        active={"timeline": lineage[-1].timeline if lineage else None, "first_lsn": a.first_lsn,
                "end_lsn": a.fold.state.lsn, "base_lsn": a.base.lsn,
                "base_cut": a.base.cut.path if a.base.cut is not None else None},
        epochs=result["epochs"], totals=totals, groups=dict(ledger.groups), dead_tails=tails,
        rollouts={**ledger.rollouts, "violations": list(ledger.violations),
                  "not_counted": [FENCED_NOT_RECORDED]},
        reader_problems=[{"kind": p.kind, "segment": p.segment, "offset": p.offset, "lsn": p.lsn,
                          "message": p.message} for p in problems],
        skipped_commits=[s._asdict() for s in a.fold.skipped],
        not_covered=a.base.not_covered + _not_covered(reader.mode, problems, a.fold.skipped),
        in_flight=_in_flight(a.fold.state.live.values()))


def _in_flight(live) -> dict:
    """The live groups at the end, by owner, and those with every rollout sealed but no
    `finished` (see the module docstring)."""
    by_owner: dict[str, int] = {}
    stalled = []
    for g in live:
        by_owner[g.owner.name] = by_owner.get(g.owner.name, 0) + 1
        if g.owner == Owner.ADMITTED and g.rollouts is not None and g.rollouts.all_sealed():
            stalled.append(g.group_id)
    return {"groups": sum(by_owner.values()),
            "by_owner": {o.name: by_owner[o.name] for o in Owner if o.name in by_owner},
            "sealed_not_finished": sorted(stalled)}


def _not_covered(mode: str, problems, skipped) -> list[str]:
    """What a read in `mode` left out: damaged regions (a torn tail was never acknowledged, so
    it holds nothing to audit) and commits that could not be applied."""
    out = []
    for p in problems:
        if p.kind is ProblemKind.TORN:
            continue
        where = f"{p.segment} offset {p.offset} (LSN {p.lsn})"
        out.append(f"{where}: {p.message}: " + ("the history ends here (point_in_time)"
                                                if mode == "point_in_time" else "skipped (salvage)"))
    out += [f"{s.text()}: commit skipped" for s in skipped]
    return out
