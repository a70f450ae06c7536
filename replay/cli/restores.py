"""`journal-inspect restores`: the rendering of `replay.restores`, one row per restore."""

from __future__ import annotations

import datetime
import sys

from ..restores import RestoreRow, restores
from . import render
from .source import open_source

HELP = "every restore in the history: crash point, checkpoint restored, work kept by lead, regenerated"
DESCRIPTION = (
    "One row per restore in the journal's history, dead histories included (a restore whose "
    "own history died in a later crash): when, the crash point (the last LSN of the history "
    "it abandoned), the checkpoint it restored, the lag bound it kept work within "
    "(max_policy_lag), what it kept (groups, rollouts, prefixes and their tokens, by lead: how "
    "many steps newer than the restored weights were the ones that made it), what it dropped "
    "and why (beyond the lag, rows lost, identity changed), the rollouts it handed back to "
    "generate, and the generation seconds of the dropped work whose rows recorded theirs. "
    "Each resume records its restore in its first commit; a branch without a record (an older "
    "journal) shows its branch point only.")
EPILOG = ("examples:\n  journal-inspect restores runs/exp1/journal\n"
          "  journal-inspect restores runs/exp1/journal --json | jq '.restores[].kept'")


def add_arguments(parser) -> None:
    pass


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _kept(r: RestoreRow) -> str:
    parts = []
    for lead, w in r.kept.items():
        what = [f"{n} {name}" for n, name in ((w.groups, "groups"), (w.rollouts, "rollouts"),
                                             (w.prefixes, f"prefixes ({w.tokens} tokens)")) if n]
        parts.append(f"lead {lead}: " + ", ".join(what))
    return "; ".join(parts) or "-"


def render_report(rep) -> list[str]:
    lines = [f"restores in {rep.path}", ""]
    if not rep.restores:
        return lines + ["no restore: the history never went back to a checkpoint"]
    rows = [[r.timeline, r.lsn if r.lsn is not None else "-", _when(r.time), r.crash_lsn if r.crash_lsn is not None
             else "?", r.point, r.step if r.step is not None else "-",
             r.max_policy_lag if r.max_policy_lag is not None else "?", _kept(r),
             ", ".join(f"{k} {n}" for k, n in r.dropped.items()) or "-",
             r.regenerate if r.regenerate is not None else "?",
             f"{r.seconds_lost:.1f}" if r.seconds_lost is not None else "-",
             ("active" if r.active else "dead") + ("" if r.recorded else ", no record")]
            for r in rep.restores]
    lines += render.table(["timeline", "lsn", "when (UTC)", "crash lsn", "restored lsn", "step", "lag", "kept",
                           "dropped", "regenerate", "s lost", "history"], rows)
    return lines


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    rep = restores(src.path, src.mode)
    if args.json:
        render.json_document(rep.to_dict(), sys.stdout)
    else:
        render.text(render_report(rep), sys.stdout)
    return 0
