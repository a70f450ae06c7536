"""`journal-inspect log`: the events of a history, filtered, one per line.

It streams: a record is read, filtered, printed and dropped, so memory does
not grow with the journal. It reads the active history (or one timeline's
history with --timeline).
"""

from __future__ import annotations

import sys
from typing import TextIO

from journal.kinds import BY_NAME, KIND_OF
from journal.reader import ProblemKind

from ..inspection import history_bytes, unique_problems
from . import options, render
from .event_rows import LINE_HEADER, event_dict, event_line, names_group
from .source import InspectError, Source, open_source

HELP = "events one per line, filtered by LSN range, group, dataset row, kind"
DESCRIPTION = (
    "Print the events of the active history (or of one timeline's history) one per line, "
    "oldest first: LSN, timeline, kind, groups, details. With --json, one JSON object per "
    "line. Filters combine (all must match).")
EPILOG = ("examples:\n  journal-inspect log J --from 1000 --to 1200\n"
          "  journal-inspect log J --group 4711            # every event naming group 4711\n"
          "  journal-inspect log J --idx 41 --task math    # row 41 of task math: takes and what followed\n"
          "  journal-inspect log J --kind discarded,checkpoint_committed\n"
          "  journal-inspect log J --timeline 1 --from 900 # a dead tail, for forensics\n"
          "  journal-inspect log J --json | jq -c 'select(.kind==\"trained\")'")


def add_arguments(parser) -> None:
    options.add_lsn_range(parser)
    parser.add_argument("--group", type=int, metavar="ID", help="only events naming this group")
    parser.add_argument("--idx", type=int, metavar="ROW", help="only this dataset row: the taken "
                        "events of its groups (the row shown first, in brackets) and every later "
                        "event naming them")
    parser.add_argument("--task", metavar="NAME", help="with --idx: only groups of this task")
    parser.add_argument("--kind", action="append", metavar="KIND",
                        help=f"only these event kinds (repeat or comma-separate): {', '.join(BY_NAME)}")
    options.add_timeline(parser)


def parse_kinds(values: list[str] | None) -> set[str] | None:
    if not values:
        return None
    kinds = {k.strip() for v in values for k in v.split(",") if k.strip()}
    bad = sorted(kinds - set(BY_NAME))
    if bad:
        raise InspectError(f"unknown event kind {', '.join(bad)} (kinds: {', '.join(BY_NAME)})")
    return kinds


def report_skips(src: Source, skipped, err: TextIO) -> list[str]:
    """What the reader skipped or found torn, as lines (also written to stderr)."""
    lines = []
    for p in unique_problems(src.reader):
        what = "torn tail" if p.kind is ProblemKind.TORN else f"{p.kind}, skipped" if src.mode == "salvage" else p.kind
        lines.append(f"{what}: {p.segment} offset {p.offset} (LSN {p.lsn}): {p.message} ({p.length} bytes)")
    for s in skipped:
        lines.append(f"skipped commit: {s.text()}")
    for line in lines:
        err.write(f"journal-inspect: {line}\n")
    return lines


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    reader = src.reader
    out = sys.stdout
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
    focus = (want_idx, args.task) if want_idx is not None else None
    records = reader.records(timeline=args.timeline, start_lsn=lo, stop_lsn=hi)
    total = history_bytes(reader, lo, hi, timeline=args.timeline)
    gaps: list[_Gap] = []  # LSNs missing between two records (damaged frames skipped in salvage)
    n = 0
    if not args.json:
        out.write(LINE_HEADER + "\n")
    last = None
    for rec in src.scan("log", records, total):
        if last is not None and rec.commit.lsn != last + 1:
            gaps.append(_Gap(rec, last))
        last = rec.commit.lsn
        for i, ev in enumerate(rec.commit.events):
            kind = KIND_OF[type(ev)]
            if want_idx is not None:
                rows = kind.takes(ev)
                if rows:
                    hit = [g.group_id for g in rows if g.idx == want_idx
                           and (args.task is None or g.task_name == args.task)]
                    gids.update(hit)
                    if not hit:
                        continue
                elif not any(names_group(ev, g) for g in gids):
                    continue
            if want_group is not None and not names_group(ev, want_group):
                continue
            if kinds is not None and kind.name not in kinds:
                continue
            n += 1
            if args.json:
                render.json_line(event_dict(rec, i, ev), out)
            else:
                out.write(event_line(rec, ev, focus=focus) + "\n")
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
