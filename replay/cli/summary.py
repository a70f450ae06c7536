"""`summary`: what a journal holds, in one pass over its active history.

Runs, branches (timelines, where each one branched, its dead tail), the LSN
range, segments live and archived, cuts, checkpoints, owner counts, the run
identity, events by kind, size on disk, and every problem the reader met (torn tails; in salvage
mode the damaged frames and commits it skipped).

The fold starts at LSN 1 when the first segment is still there (archived
segments are read too), otherwise from the oldest valid cut that covers the
retired segments.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Iterator

from journal import Owner, Record, State
from journal.kinds import KIND_OF, KINDS
from journal.reader import ProblemKind
from journal.identity import hex_line, to_hex
from snapshot import RestoreError, read_cut
from snapshot.catalog import Skipped, anchored_cuts

from ..cut_status import FILES_CHECKED, Anchors, anchor_lsns, list_cuts, tally
from ..inspection import (Fold, active_lineage, dead_branches, dead_bytes, dead_records,
                    history_bytes, unique_problems)
from . import options, render
from .source import InspectError, PROBLEMS, Source, open_source

HELP = "runs, branches, LSN range, segments, cuts, checkpoints, owner counts, size"
DESCRIPTION = (
    "What the journal holds: the run, its branches (one per restore) and their dead tails, "
    "the LSN range of the active history, segments live and archived, cuts, checkpoints, "
    "owner counts at the end, events by kind, size on disk, and every problem met on the "
    "way. In --mode salvage it reads around damage and lists what it skipped.")
EPILOG = ("examples:\n  journal-inspect summary runs/exp1/journal\n"
          "  journal-inspect summary runs/exp1/journal --mode salvage   # a damaged journal\n"
          "  journal-inspect summary ckpt/step_8/ownership              # a cut directory")


add_arguments = options.add_all  # --all is its only option of its own


def _disk(path: str) -> dict[str, int]:
    out = {"total": 0, "snapshots": 0, "torn": 0}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                n = os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            out["total"] += n
            rel = os.path.relpath(dirpath, path).split(os.sep)[0]
            if rel in ("snapshots", "torn"):
                out[rel] += n
    return out


def problem_dicts(reader) -> list[dict]:
    return [{"kind": p.kind, "segment": p.segment, "offset": p.offset, "lsn": p.lsn,
             "message": p.message, "bytes": p.length} for p in unique_problems(reader)]


def _cut_summary(src: Source) -> dict:
    cut = read_cut(src.path)
    m = cut.manifest
    return {"path": src.path, "kind": "cut", "run_id": m.run_id, "timeline": m.timeline, "lsn": m.lsn,
            "chain": m.chain, "step": m.checkpoint_step, "owners": dict(m.counts),
            "next_group_id": m.next_group_id, "identity": to_hex(cut.state.identity),
            "checkpoints": {"committed": {k: v for k, v in m.committed_checkpoints.items()},
                            "pending": {k: v for k, v in m.pending_checkpoints.items()}},
            "loader_state": m.has_loader_state,
            "files": {k: {"size": v.size, "sha256": v.sha256} for k, v in m.files.items()},
            "disk_bytes": _disk(src.path)["total"]}


def summarize(src: Source) -> dict:
    if src.kind == "cut":
        return _cut_summary(src)
    reader = src.reader
    lineage = active_lineage(reader)
    first_lsn = lineage[0].segments[0].first_lsn if lineage else 1
    state, base_cut = _start(src, first_lsn)
    fold = Fold(state, tolerant=src.mode == "salvage")
    scanned_from = state.lsn + 1
    passed = _scan_active(src, fold)
    tails = _dead_tails(src)
    state = fold.state
    live = [s for s in reader.segments if not s.archived]
    arch = [s for s in reader.segments if s.archived]
    # the cuts' files and anchors only: unpickling their contents (checks 5-7) is verify's
    cuts = list_cuts(src.path, reader, restore_lsn=_latest(state), find_restore=False, contents=False,
                     anchors=passed.anchors)
    newest = next((c for c in cuts if c["status"] == "valid"), None)
    return {
        "path": src.path, "kind": "journal", "mode": src.mode,
        "run_id": reader.run_id.hex() if reader.run_id else None,
        "active": {"timeline": lineage[-1].timeline if lineage else None, "first_lsn": first_lsn,
                   "end_lsn": state.lsn, "scanned_from_lsn": scanned_from, "commits_scanned": passed.commits,
                   "base_cut": base_cut.path if base_cut else None, "events": passed.events()},
        "timelines": _timelines(reader, lineage, passed.lsn_range, tails), "dead_tails": tails,
        "segments": {"live": len(live), "live_bytes": sum(s.size for s in live),
                     "archived": len(arch), "archived_bytes": sum(s.size for s in arch)},
        "disk": _disk(src.path),
        "cuts": {**tally(cuts), "newest_valid_lsn": newest["lsn"] if newest else None,
                 "restore_base": next((c["name"] for c in cuts if c["restore_base"]), None),
                 "checked": FILES_CHECKED},
        "checkpoints": _checkpoints(state),
        "owners": {o.name: state.counts[o] for o in Owner},
        "live_groups": len(state.live), "next_group_id": state.next_group_id,
        "loader_state": state.loader is not None, "identity": to_hex(state.identity),
        "problems": problem_dicts(reader),
        "skipped_commits": [s._asdict() for s in fold.skipped],
    }


def _start(src: Source, first_lsn: int) -> tuple[State, object]:
    """(state to fold on, the cut it came from or None): empty when the history starts at LSN 1,
    else the oldest usable cut covering the retired segments; InspectError when there is none."""
    if first_lsn <= 1:
        return State(), None
    skipped: list[Skipped] = []
    # chosen by their manifests (anchored, nothing unpickled), oldest first: only the cut the
    # fold starts from is loaded (the next one when it fails a check)
    covering = sorted((v for v in anchored_cuts(src.reader, src.path, skipped) if v.lsn >= first_lsn - 1),
                      key=lambda v: v.lsn)
    for view in covering:
        try:
            base_cut = read_cut(view.path)
        except RestoreError:
            continue
        return base_cut.state.copy(), base_cut
    raise InspectError(f"{src.path}: the segments before LSN {first_lsn} were retired and no "
                       "valid cut covers them, so the owner counts cannot be rebuilt",
                       PROBLEMS)


# what the shapes held may reach before they are added up: SHAPES_HELD keys of at most
# SHAPE_EVENTS classes each (a larger commit is counted event by event), about 2 MiB at most
SHAPES_HELD = 1024
SHAPE_EVENTS = 256


class EventTally:
    """Events by kind over the records passed through `counted`, each timeline's first and last
    LSN among them, and the `Anchors` at the LSNs in `anchor_at` (the cuts'). A commit is
    counted by its shape, the tuple of its events' classes (built in C by `map`), so the
    per-event work is one `type` call: commits of one workload share a few shapes, which are
    expanded into kinds at the end (or when `SHAPES_HELD` different ones have piled up). A
    commit of more than `SHAPE_EVENTS` events is counted event by event."""

    def __init__(self, anchor_at: set[int] = frozenset()) -> None:
        self.anchor_at = anchor_at
        self.anchors: Anchors = {}
        self.shapes: dict[tuple[type, ...], int] = {}  # event classes of a commit -> commits
        self.by_type: dict[type, int] = {}               # event class -> events, shapes added up
        self.commits = 0
        self.lsn_range: dict[int, list[int]] = {}       # timeline -> [first, last] LSN passed

    def counted(self, records: Iterable[Record]) -> Iterator[Record]:
        shapes, lsn_range, anchor_at = self.shapes, self.lsn_range, self.anchor_at
        get = shapes.get
        timeline, span = None, None
        try:
            for rec in records:
                events = rec.commit.events
                if len(events) > SHAPE_EVENTS:
                    self._add_events(events)
                    key = ()
                else:
                    key = tuple(map(type, events))
                n = get(key)
                if n is None:
                    if len(shapes) >= SHAPES_HELD:
                        self._add_up()
                    shapes[key] = 1
                else:
                    shapes[key] = n + 1
                if rec.timeline != timeline:
                    timeline = rec.timeline
                    span = lsn_range.setdefault(timeline, [rec.commit.lsn, rec.commit.lsn])
                lsn = span[1] = rec.commit.lsn
                if lsn in anchor_at:
                    self.anchors[lsn] = (rec.timeline, rec.chain)
                yield rec
        finally:
            self._add_up()

    def _add_events(self, events) -> None:
        by_type = self.by_type
        for ev in events:
            kind = type(ev)
            by_type[kind] = by_type.get(kind, 0) + 1

    def _add_up(self) -> None:
        by_type = self.by_type
        for key, n in self.shapes.items():
            self.commits += n
            for kind in key:
                by_type[kind] = by_type.get(kind, 0) + n
        self.shapes.clear()

    def events(self) -> dict[str, int]:
        """Events by kind name, every kind listed."""
        out = {k.name: 0 for k in KINDS}
        for kind, n in self.by_type.items():
            out[KIND_OF[kind].name] = n
        return out


def _scan_active(src: Source, fold: Fold) -> EventTally:
    """Fold the active history after `fold`'s state, counting its events as they pass."""
    reader = src.reader
    passed = EventTally(anchor_lsns(src.path))
    scanned_from = fold.state.lsn + 1
    fold.add_all(passed.counted(src.scan("summary: active history", reader.records(start_lsn=scanned_from),
                                         history_bytes(reader, scanned_from))))
    return passed


def _timelines(reader, lineage: list, lsn_range: dict[int, list[int]], tails: list[dict]) -> list[dict]:
    """One row per timeline: parent, branch point, segments, its active LSNs and dead tail."""
    on_active = {tl.timeline for tl in lineage}
    timelines = []
    for t, tl in sorted(reader.timelines.items()):
        segs = tl.segments
        r = lsn_range.get(t)
        tail = next((x for x in tails if x["timeline"] == t), None)
        timelines.append({
            "timeline": t, "parent": tl.parent or None, "branch_lsn": tl.branch_lsn,
            "segments": len(segs), "archived": sum(1 for s in segs if s.archived),
            "bytes": sum(s.size for s in segs),
            "active_lsns": r, "status": "active" if t in on_active and r else "dead",
            "dead_tail": None if tail is None else [tail["first_lsn"], tail["last_lsn"], tail["commits"]]})
    return timelines


def _checkpoints(state: State) -> dict:
    latest = state.latest_committed_checkpoint()
    return {
        "committed": [{"step": s, "lsn": l} for s, l in sorted(state.committed_checkpoints.items(),
                                                               key=lambda kv: kv[1])],
        "pending": [{"step": s, "lsn": l} for s, l in sorted(state.pending_checkpoints.items(),
                                                             key=lambda kv: kv[1])],
        "latest_committed": None if latest is None else {"step": latest[0], "lsn": latest[1]}}


def _dead_tails(src: Source) -> list[dict]:
    """Each dead tail's LSN range, in one pass over them all."""
    reader = src.reader
    branches = dead_branches(reader)
    tails = {b.timeline: {"timeline": b.timeline, "after_lsn": b.branch_lsn, "diverged_at": b.divergence,
                          "first_lsn": None, "last_lsn": None, "commits": 0} for b in branches}
    records = (rec for b in branches for rec in dead_records(reader, b))
    for rec in src.scan("summary: dead tails", records, dead_bytes(reader, branches)):
        t = tails[rec.timeline]
        t["first_lsn"] = t["first_lsn"] or rec.commit.lsn
        t["last_lsn"] = rec.commit.lsn
        t["commits"] += 1
    return list(tails.values())


def _latest(state: State) -> int | None:
    latest = state.latest_committed_checkpoint()
    return latest[1] if latest else None


def render_summary(s: dict, show_all: bool = False) -> list[str]:
    if s["kind"] == "cut":
        return _render_cut(s)
    a = s["active"]
    lines = _journal_keyvalues(s, show_all)
    lines += ["", "owners at the end of the active history"]
    lines += render.table(list(s["owners"]), [list(s["owners"].values())], indent="  ")
    lines += ["", f"events on the active history (LSN {a['scanned_from_lsn']}..{a['end_lsn']})"]
    ev = {k: v for k, v in a["events"].items()}
    lines += render.table(list(ev), [list(ev.values())], indent="  ")
    lines += ["", "timelines"]
    rows = []
    for t in s["timelines"]:
        act = t["active_lsns"]
        tail = t["dead_tail"]
        rows.append([t["timeline"], t["parent"], t["branch_lsn"], t["segments"], t["archived"],
                     render.size(t["bytes"]), f"{act[0]}..{act[1]}" if act else "-",
                     f"{tail[0]}..{tail[1]} ({tail[2]} commits)" if tail and tail[2] else "-"])
    lines += render.capped_table(["timeline", "parent", "branched at", "segments", "archived", "bytes",
                                  "active LSNs", "dead tail"], rows, show_all, indent="  ")
    return lines + _problem_lines(s, show_all)


def _render_cut(s: dict) -> list[str]:
    lines = render.keyvalues([
        ("cut", s["path"]), ("run", s["run_id"]), ("timeline", s["timeline"]), ("LSN", s["lsn"]),
        ("checkpoint step", s["step"]), ("next group id", s["next_group_id"]),
        ("loader state", s["loader_state"]), ("run identity", hex_line(s["identity"])),
        ("size on disk", render.size(s["disk_bytes"]))])
    lines += ["", "owners"] + render.table(list(s["owners"]), [list(s["owners"].values())], indent="  ")
    lines += ["", "files"] + render.table(["file", "size", "sha256"], [
        [k, v["size"], v["sha256"][:16] + "..."] for k, v in sorted(s["files"].items())], indent="  ")
    return lines


def _journal_keyvalues(s: dict, show_all: bool) -> list[str]:
    """The key: value head of a journal's summary."""
    a = s["active"]
    seg, disk = s["segments"], s["disk"]
    ck = s["checkpoints"]
    latest = ck["latest_committed"]
    scanned = (f"LSN {a['scanned_from_lsn']}..{a['end_lsn']} scanned" if a["commits_scanned"] else "nothing to scan")
    if a["base_cut"]:
        scanned += f", on top of cut {os.path.basename(a['base_cut'])}"
    return render.keyvalues([
        ("journal", s["path"]),
        ("run", s["run_id"]),
        ("mode", s["mode"]),
        ("active history", f"timeline {a['timeline']}, LSN {a['first_lsn'] if a['first_lsn'] > 1 else 1}.."
                           f"{a['end_lsn']} ({scanned})"),
        ("branches", f"{len(s['timelines'])} timeline(s), {len(s['dead_tails'])} dead tail(s)"),
        ("segments", f"{seg['live']} live ({render.size(seg['live_bytes'])}), {seg['archived']} archived "
                     f"({render.size(seg['archived_bytes'])})"),
        ("size on disk", f"{render.size(disk['total'])} (snapshots {render.size(disk['snapshots'])}, "
                         f"torn tails kept aside {render.size(disk['torn'])})"),
        ("cuts", f"{s['cuts']['valid']} valid, {s['cuts']['stale']} stale, {s['cuts']['incomplete']} "
                 f"incomplete, {s['cuts']['invalid']} invalid"
                 + (f"; restore base {s['cuts']['restore_base']}" if s["cuts"]["restore_base"] else "")
                 + ("; sha256 and anchor checked, `journal-inspect verify` checks their contents"
                    if any(s["cuts"][k] for k in ("valid", "stale", "invalid")) else "")),
        ("latest checkpoint", "none committed" if latest is None else
         f"step {latest['step']} at LSN {latest['lsn']} (what restore returns)"),
        ("checkpoints", render.joined((f"step {c['step']}@{c['lsn']}" for c in ck["committed"]), show_all)
         or "-"),
        ("pending", render.joined((f"step {c['step']}@{c['lsn']} (begun, never committed)" for c in ck["pending"]),
                                  show_all) or "-"),
        ("live groups", f"{s['live_groups']} (next group id {s['next_group_id']}); loader state "
                        f"{'recorded' if s['loader_state'] else 'none'}"),
        ("run identity", f"{hex_line(s['identity'])} (at the end)"),
    ])


def _problem_lines(s: dict, show_all: bool) -> list[str]:
    """The problems the reader met and the commits a salvage fold skipped (none: no lines)."""
    probs = s["problems"]
    skipped = s["skipped_commits"]
    if not (probs or skipped):
        return []
    lines = ["", "problems" + (" (skipped in salvage mode)" if s["mode"] == "salvage" else "")]
    listing = [f"  {_problem_kind(p)}: {p['segment']} offset {p['offset']} LSN {p['lsn']}: "
               f"{p['message']} ({p['bytes']} bytes)" for p in probs]
    listing += [f"  skipped commit: {k['segment']} offset {k['offset']} (LSN {k['lsn']}): {k['message']}"
                for k in skipped]
    return lines + render.capped_lines(listing, show_all)


def _problem_kind(p: dict) -> str:
    return "torn tail (never acknowledged; the writer cuts it off on open)" if p["kind"] == ProblemKind.TORN else p["kind"]


def run(args) -> int:
    s = summarize(open_source(args.path, args.mode))
    if args.json:
        render.json_document(s, sys.stdout)
    else:
        render.text(render_summary(s, args.show_all), sys.stdout)
    return 0
