"""`journal-inspect rescue`: the rendering of `replay.rescue` (the one command that writes, and
only into the new directory it is given)."""

from __future__ import annotations

import dataclasses
import sys

from ..rescue import rescue
from . import render
from .source import InspectError, open_source

HELP = "continue a damaged run in a fresh journal directory, from the newest point it restores to"
DESCRIPTION = (
    "Restore PATH (a journal, or a cut) at its newest committed checkpoint whose state does not "
    "need the damaged frames, and start a new journal in NEWDIR from there: a base cut of that "
    "state in NEWDIR/snapshots, then the resume's first commit (group ids continue above every "
    "id the old journal can have allocated). Prints what it restored and what it passed over. "
    "PATH is only read (whatever --mode says, damage is read around): keep it for forensics. "
    "NEWDIR must not exist yet or be empty. It prints how the run goes on: for a trainer on "
    "replay.Session, the mv commands that put NEWDIR in PATH's place (PATH kept as PATH.damaged) "
    "so that the trainer's own Session.open restores it; on the low-level API, state = "
    "replay.restore(NEWDIR); Journal.open(NEWDIR, resume=state). This is the command the "
    "JournalCorrupt of Journal.open names when a history cannot be continued in place.")
EPILOG = ("examples:\n  journal-inspect rescue runs/exp1/journal runs/exp1/journal-rescued\n"
          "  journal-inspect rescue runs/exp1/journal runs/exp1/journal-rescued --step 800")


def add_arguments(parser) -> None:
    parser.add_argument("newdir", metavar="NEWDIR", help="the new journal directory (new or empty)")
    parser.add_argument("--step", type=int, metavar="S",
                        help="restore the committed checkpoint of step S (default: the newest one "
                             "the damage does not touch)")


def run(args) -> int:
    src = open_source(args.path, "salvage")  # a damaged journal is what it is for
    try:
        report = rescue(src.path, args.newdir, step=args.step)
    except (FileExistsError, ValueError) as exc:
        raise InspectError(str(exc)) from None
    if args.json:
        render.json_document(dataclasses.asdict(report), sys.stdout)
    else:
        render.text(report.lines(), sys.stdout)
    return 0
