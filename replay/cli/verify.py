"""`journal-inspect verify`: the rendering of `replay.verify` (exit 1 on problems)."""

from __future__ import annotations

import sys

from journal.reader import ProblemKind

from ..verify import CUT_CHECKS, verify
from . import options, render
from .progress import Progress
from .source import PROBLEMS, open_source

HELP = "the whole chain of checks over journal and cuts (exit 1 on problems)"
DESCRIPTION = (
    "Check everything restore relies on: every segment header, frame checksum, chain link "
    "and LSN on every timeline; each branch continues its parent's chain; the ownership rules "
    f"over the active history and every dead tail; every cut through {CUT_CHECKS} and against the "
    "journal's own fold at its LSN; and that the restore point is reachable. Problems name "
    "segment, offset and LSN. Torn tails (never acknowledged) and stale cuts are warnings. "
    "Whatever --mode says, verify reads every frame as salvage does, so it reports all the "
    "damage, not only the first.")
EPILOG = ("examples:\n  journal-inspect verify runs/exp1/journal && echo clean\n"
          "  journal-inspect verify runs/exp1/journal --json | jq '.problems'")


_LABELS = {ProblemKind.TORN.value: "torn tail"}


add_arguments = options.add_all  # --all is its only option of its own


def render_report(rep, show_all: bool = False) -> list[str]:
    lines = render.table(["check", "target", "result", "detail"],
                         [[c.check, c.target, c.result, c.detail] for c in rep.checks])
    for title, items in (("problems", rep.problems), ("warnings", rep.warnings)):
        if items:
            lines += ["", f"{title}:"]
            lines += render.capped_lines((_finding_line(p) for p in items), show_all)
    lines += ["", "clean" if rep.clean else f"{len(rep.problems)} problem(s) found"]
    return lines


def _finding_line(p) -> str:
    where = ", ".join(x for x in (p.segment and f"segment {p.segment}",
                                  p.offset is not None and f"offset {p.offset}",
                                  p.lsn is not None and f"LSN {p.lsn}") if x)
    return f"  {_LABELS.get(p.kind, p.kind)}: " + (f"{where}: " if where else "") + p.message


def run(args) -> int:
    src = open_source(args.path, args.mode)
    rep = verify(src.path, progress=Progress)
    if args.json:
        render.json_document(rep.to_dict(), sys.stdout)
    else:
        render.text(render_report(rep, args.show_all), sys.stdout)
    return 0 if rep.clean else PROBLEMS
