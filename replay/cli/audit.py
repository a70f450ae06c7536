"""`journal-inspect audit`: the rendering of `replay.audit` (exit 1 unless clean)."""

from __future__ import annotations

import sys

from ..audit import audit
from . import render
from .progress import Progress
from .source import PROBLEMS, open_source

HELP = "exactly-once report per loader epoch (exit 1 if a row was trained twice or lost)"
DESCRIPTION = (
    "Per epoch of the loader, over the active history: dataset rows trained exactly once, "
    "more than once (listed, with groups and steps), lost (listed: taken - on the active "
    "history or on a dead tail - but never trained, not dropped and not live at the end), "
    "dropped by reason, still in flight; and per restore, the work its dead tail held "
    "(rollouts finished there, salvaged, regenerated; groups trained there and retrained). "
    "A row taken only on a dead tail that the resumed run has not reached yet is 'pending', "
    "not lost.")
EPILOG = ("examples:\n  journal-inspect audit runs/exp1/journal\n"
          "  journal-inspect audit runs/exp1/journal --json | jq '.epochs[].trained_more'")


def add_arguments(parser) -> None:
    pass


def _key_text(epoch, task) -> str:
    return f"epoch {'-' if epoch is None else epoch}" + (f" task {task}" if task is not None else "")

def _row_text(r: dict) -> str:
    head = f"{_key_text(r['epoch'], r['task_name'])} idx {r['idx']}"
    parts = []
    for g in r.get("groups", []):
        s = f"group {g['group_id']} taken at LSN {g['taken_lsn']}"
        if "trained_step" in g:
            s += f", trained at step {g['trained_step']} (LSN {g['trained_lsn']})"
        if "dropped_reason" in g:
            s += f", dropped ({g['dropped_reason']}) at LSN {g['dropped_lsn']}"
        parts.append(s)
    return head + (f" ({r['times']} times)" if "times" in r else "") + ": " + (
        "; ".join(parts) if parts else r.get("why", ""))


def render_report(doc: dict) -> list[str]:
    a = doc["active"]
    lines = [f"exactly-once audit of {doc['path']}",
             f"active history: timeline {a['timeline']}, LSN {a['first_lsn']}..{a['end_lsn']} "
             f"({doc['groups']['taken']} groups taken, {doc['groups']['trained']} trained, "
             f"{doc['groups']['dropped']} dropped)", ""]
    rows = []
    for d in doc["epochs"]:
        rows.append([d["epoch"], d["rows_taken"], d["trained_once"], d["trained_more_count"], d["lost_count"],
                     sum(d["dropped"].values()), d["in_flight"], d["pending_retake"]])
    t = doc["totals"]
    rows.append(["total", t["rows_taken"], t["trained_once"], t["trained_more_count"], t["lost_count"],
                 t["dropped"], t["in_flight"], t["pending_retake"]])
    lines += render.table(["epoch", "rows taken", "trained once", "trained 2+", "lost", "dropped",
                           "in flight", "pending re-take"], rows, right=[True] * 8)
    dropped = [(d["epoch"], r, n) for d in doc["epochs"] for r, n in sorted(d["dropped"].items())]
    if dropped:
        lines += ["", "dropped rows by reason"]
        lines += render.table(["epoch", "reason", "rows"], dropped, indent="  ")
    for key, title in (("trained_more", "rows trained more than once"),
                       ("lost", "lost rows (taken, never trained, not dropped, not live at the end)"),
                       ("trained_and_live_again", "rows trained and taken again (will be trained twice)")):
        items = [r for d in doc["epochs"] for r in d[key]]
        if items:
            lines += ["", f"{title}: {len(items)}"]
            lines += [f"  {_row_text(r)}" for r in items]
    if doc["dead_tails"]:
        lines += ["", "work held by dead tails (one per restore)"]
        lines += render.table(
            ["timeline", "restored at LSN", "dead LSNs", "commits", "taken", "rollouts finished",
             "salvaged", "regenerated", "trained (retrained)", "discarded"],
            [[x["timeline"], x["restored_at_lsn"],
              f"{x['first_lsn']}..{x['last_lsn']}" if x["commits"] else "-", x["commits"], x["taken"],
              x["finished"], x["salvaged"], x["regenerated"], x["trained"], x["discarded"]]
             for x in doc["dead_tails"]], indent="  ")
    if doc["reader_problems"] or doc["skipped_commits"]:
        lines += ["", "read problems (the audit covers what could be read):"]
        lines += [f"  {p['kind']}: {p['segment']} offset {p['offset']} LSN {p['lsn']}: {p['message']}"
                  for p in doc["reader_problems"]]
        lines += [f"  skipped commit: {s['segment']} offset {s['offset']} LSN {s['lsn']}: {s['message']}"
                  for s in doc["skipped_commits"]]
    if doc["clean"]:
        lines += ["", "CLEAN: no row trained twice, no row lost"]
    else:
        lines += ["", f"PROBLEMS: {t['trained_more_count']} row(s) trained more than once, "
                      f"{t['lost_count']} row(s) lost"]
    return lines


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    rep = audit(src.path, src.mode, progress=Progress, reader=src.reader)
    doc = rep.to_dict()
    if args.json:
        render.json_document(doc, sys.stdout)
    else:
        render.text(render_report(doc), sys.stdout)
    return 0 if rep.clean else PROBLEMS
