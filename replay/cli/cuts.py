"""`journal-inspect cuts`: each cut and whether restore may use it (`replay.cut_status`)."""

from __future__ import annotations

import os
import sys

from snapshot.checks import CHECKS
from journal.layout import SNAPSHOTS_DIR

from ..cut_status import check_one_cut, list_cuts, tally
from . import options, render
from .source import open_source

HELP = "each cut: valid, stale, incomplete, or which check fails"
DESCRIPTION = (
    "List every cut under <journal>/snapshots (newest first) through the chain of checks, "
    "each named by what fails it: "
    + ", ".join(f"{c.number} {c.what}" for c in CHECKS)
    + " (a stale cut fails only the last: it belongs to a dead branch). "
    "Marks the cut restore would start from.")
EPILOG = ("examples:\n  journal-inspect cuts runs/exp1/journal\n"
          "  journal-inspect cuts ckpt/step_8/ownership --json")


add_arguments = options.add_all  # --all is its only option of its own


def entries_of(src) -> list[dict]:
    return [check_one_cut(src.path)] if src.kind == "cut" else list_cuts(src.path, src.reader)


def render_entries(entries: list[dict], src, show_all: bool = False) -> list[str]:
    if not entries:
        return [f"no cuts under {os.path.join(src.path, SNAPSHOTS_DIR)}"]
    rows = []
    for e in entries:
        status = e["status"] + (" (restore base)" if e["restore_base"] else "")
        rows.append([e["name"], e["lsn"], e["timeline"], e["step"], status, e["reason"] or ""])
    lines = render.capped_table(["cut", "LSN", "timeline", "step", "status", "why"], rows, show_all)
    c = tally(entries)
    lines += ["", f"{c['valid']} valid, {c['stale']} stale, {c['incomplete']} incomplete, "
                  f"{c['invalid']} invalid"]
    return lines


def run(args) -> int:
    src = open_source(args.path, args.mode)
    entries = entries_of(src)
    if args.json:
        render.json_document({"path": src.path, "cuts": entries, "counts": tally(entries)}, sys.stdout)
    else:
        render.text(render_entries(entries, src, args.show_all), sys.stdout)
    return 0
