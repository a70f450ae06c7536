"""`log` (events of a history, filtered) and `group ID` (one group's whole history).

Both stream: a record is read, filtered, printed and dropped, so memory does
not grow with the journal. `log` reads the active history (or one timeline's
history with --timeline); `group` reads the active history and every dead
tail, marking which branch each event is on.
"""

from __future__ import annotations

import sys
from typing import TextIO

from journal import EVENT_KINDS, Admitted, Owner, Taken

from . import output, tables
from .event_rows import LINE_HEADER, event_dict, event_line, names_group
from .inspect_source import InspectError, PROBLEMS, Source
from .walk import dead_branches, dead_records, history, unique_problems

# the owner an event moves its groups to
_TO = {"taken": Owner.RESERVED, "diverted": Owner.SPARE, "admitted": Owner.ADMITTED,
       "finished": Owner.REPLAY, "trained": Owner.TRAINED, "discarded": Owner.DROPPED}


def parse_kinds(values: list[str] | None) -> set[str] | None:
    if not values:
        return None
    kinds = {k.strip() for v in values for k in v.split(",") if k.strip()}
    bad = sorted(kinds - set(EVENT_KINDS))
    if bad:
        raise InspectError(f"unknown event kind {', '.join(bad)} (kinds: {', '.join(EVENT_KINDS)})")
    return kinds


def report_skips(src: Source, skipped, err: TextIO) -> list[str]:
    """What the reader skipped or found torn, as lines (also written to stderr)."""
    lines = []
    for p in unique_problems(src.reader):
        what = "torn tail" if p.kind == "torn" else f"{p.kind}, skipped" if src.mode == "salvage" else p.kind
        lines.append(f"{what}: {p.segment} offset {p.offset} (LSN {p.lsn}): {p.message} ({p.length} bytes)")
    for s in skipped:
        lines.append(f"skipped commit: {s.text()}")
    for line in lines:
        err.write(f"journal-inspect: {line}\n")
    return lines


def log(src: Source, args, out: TextIO) -> int:
    reader = src.need_journal("log")
    kinds = parse_kinds(args.kind)
    lo = args.from_lsn if args.from_lsn is not None else 1
    hi = args.to_lsn
    if hi is not None and hi < lo:
        raise InspectError(f"--to {hi} is before --from {lo}")
    if args.timeline is not None and args.timeline not in reader.timelines:
        raise InspectError(f"no timeline {args.timeline} (timelines: {sorted(reader.timelines)})")
    gids: set[int] = set()
    want_group = args.group
    want_idx = args.idx
    records = history(reader, timeline=args.timeline, start_lsn=lo, stop_lsn=hi)
    gaps: list[_Gap] = []  # LSNs missing between two records (damaged frames skipped in salvage)
    n = 0
    if not args.json:
        out.write(LINE_HEADER + "\n")
    bar = src.progress("log")
    try:
        last = None
        for rec in bar.records(records, src.sizes):
            if last is not None and rec.commit.lsn != last + 1:
                gaps.append(_Gap(rec, last))
            last = rec.commit.lsn
            for i, ev in enumerate(rec.commit.events):
                kind = type(ev).__struct_config__.tag
                if want_idx is not None:
                    if type(ev) is Taken:
                        hit = [g.group_id for g in ev.groups if g.idx == want_idx
                               and (args.task is None or g.task_name == args.task)]
                        gids.update(hit)
                        if not hit:
                            continue
                    elif not any(names_group(ev, g) for g in gids):
                        continue
                if want_group is not None and not names_group(ev, want_group):
                    continue
                if kinds is not None and kind not in kinds:
                    continue
                n += 1
                if args.json:
                    output.json_line(event_dict(rec, i, ev), out)
                else:
                    out.write(event_line(rec, ev) + "\n")
    finally:
        bar.close()
    lines = report_skips(src, gaps, sys.stderr)
    if not args.json:
        out.write(f"-- {n} event(s)" + (f"; {len(lines)} region(s) skipped or torn, see above" if lines else "")
                  + "\n")
    return 0


class _Gap:
    def __init__(self, rec, last):
        self.rec, self.last = rec, last

    def text(self) -> str:
        r = self.rec
        return (f"{r.segment} offset {r.offset} (LSN {r.commit.lsn}): LSNs {self.last + 1}.."
                f"{r.commit.lsn - 1} are missing (damaged frames skipped)")


def group(src: Source, args, out: TextIO) -> int:
    reader = src.need_journal("group")
    gid = args.group_id
    events: list[dict] = []
    lines: list[str] = []
    locator = None
    owner = None
    replaced_by = []
    bar = src.progress("group")

    def scan(records, branch: str) -> None:
        nonlocal locator, owner
        for rec in bar.records(records, src.sizes):
            for i, ev in enumerate(rec.commit.events):
                t = type(ev)
                if t is Admitted and ev.replaces == gid:
                    replaced_by.append({"group_id": ev.groups[0] if ev.groups else None,
                                        "lsn": rec.commit.lsn, "timeline": rec.timeline, "branch": branch})
                if not names_group(ev, gid):
                    continue
                d = event_dict(rec, i, ev)
                d["branch"] = branch
                if t is Taken:
                    g = next(g for g in ev.groups if g.group_id == gid)
                    locator = {"idx": g.idx, "task_name": g.task_name, "epoch": g.epoch,
                               "fingerprint": g.fingerprint.hex() if g.fingerprint else None}
                    d["locators"] = [x for x in d["locators"] if x["group_id"] == gid]
                    d["groups"] = [gid]
                if branch == "active":
                    owner = _TO.get(d["kind"], owner)
                events.append(d)
                lines.append(event_line(rec, ev, note="" if branch == "active" else f"[{branch}]"))

    try:
        scan(history(reader), "active")
        for b in dead_branches(reader):
            scan(dead_records(reader, b), f"dead tail of timeline {b.timeline}")
    finally:
        bar.close()
    if not events:
        sys.stderr.write(f"journal-inspect: group {gid} does not appear in {src.path}\n")
        if args.json:
            output.json_document({"group_id": gid, "found": False, "events": []}, out)
        return PROBLEMS
    doc = {"group_id": gid, "found": True, "locator": locator,
           "owner": owner.name if owner is not None else None,
           "on_active_history": owner is not None, "replaced_by": replaced_by, "events": events}
    if args.json:
        output.json_document(doc, out)
        return 0
    loc = locator or {}
    head = [("group", gid),
            ("locator", ", ".join(f"{k}={v}" for k, v in loc.items() if v is not None) or "unknown "
             "(its taken event was not read)"),
            ("owner", (owner.name + " (end of the active history)") if owner is not None
             else "not on the active history (only on a dead tail)")]
    if replaced_by:
        head.append(("replaced by", ", ".join(f"group {r['group_id']} at LSN {r['lsn']} ({r['branch']})"
                                              for r in replaced_by)))
    text = tables.keyvalues(head) + ["", LINE_HEADER] + lines
    output.text(text, out)
    return 0
