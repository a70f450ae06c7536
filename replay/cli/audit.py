"""`journal-inspect audit`: the rendering of `replay.audit` (exit 1 unless clean)."""

from __future__ import annotations

import sys

from journal import ProblemKind

from ..audit import audit
from . import options, render
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
    "not lost. The groups still in flight at the end (taken, neither trained nor dropped: "
    "reserved, admitted, replay or spare) are counted by owner, and admitted groups whose "
    "rollouts are all sealed but which were never finished are listed.")
EPILOG = ("examples:\n  journal-inspect audit runs/exp1/journal\n"
          "  journal-inspect audit runs/exp1/journal --expect-drained   # a run that has ended\n"
          "  journal-inspect audit runs/exp1/journal --json | jq '.epochs[].trained_more'")


def add_arguments(parser) -> None:
    options.add_all(parser)
    parser.add_argument("--expect-drained", action="store_true",
                        help="the run has ended: exit 1 also when a group is still in flight "
                             "(taken and neither trained nor dropped; a spare left in the "
                             "reserve counts: discard unused spares to drain a run)")


def _key_text(epoch, task) -> str:
    return f"epoch {'-' if epoch is None else epoch}" + (f" task {task}" if task is not None else "")

def _row_text(r: dict, show_all: bool) -> str:
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
        render.joined(parts, show_all, "; ") if parts else r.get("why", ""))


def render_report(doc: dict, show_all: bool = False, expect_drained: bool = False) -> list[str]:
    a = doc["active"]
    lines = [f"exactly-once audit of {doc['path']}",
             f"active history: timeline {a['timeline']}, LSN {a['first_lsn']}..{a['end_lsn']} "
             f"({doc['groups']['taken']} groups taken, {doc['groups']['trained']} trained, "
             f"{doc['groups']['dropped']} dropped)"]
    if a["base_cut"] is not None:
        lines.append(f"LSN 1..{a['base_lsn']} counted from the row ledger of the cut {a['base_cut']}")
    lines.append("")
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
            lines += render.capped_lines((f"  {_row_text(r, show_all)}" for r in items), show_all)
    if doc["dead_tails"]:
        lines += ["", "work held by dead tails (one per restore)"]
        lines += render.capped_table(
            ["timeline", "restored at LSN", "dead LSNs", "commits", "taken", "rollouts finished",
             "salvaged", "regenerated", "trained (retrained)", "discarded"],
            [[x["timeline"], x["restored_at_lsn"],
              f"{x['first_lsn']}..{x['last_lsn']}" if x["commits"] else "-", x["commits"], x["taken"],
              x["finished"], x["salvaged"], x["regenerated"], x["trained"], x["discarded"]]
             for x in doc["dead_tails"]], show_all, indent="  ")
    lines += _rollout_lines(doc["rollouts"], show_all)
    torn = [p for p in doc["reader_problems"] if p["kind"] == ProblemKind.TORN]
    if torn:
        lines += ["", "torn tails (never acknowledged, nothing to audit in them):"]
        lines += render.capped_lines((f"  {p['segment']} offset {p['offset']} LSN {p['lsn']}: {p['message']}"
                                      for p in torn), show_all)
    if doc["not_covered"]:
        lines += ["", f"NOT COVERED by this audit ({doc['mode']} read; the rows these held are "
                      "unaudited):"]
        lines += render.capped_lines((f"  {x}" for x in doc["not_covered"]), show_all)
    lines += _in_flight_lines(doc["in_flight"], show_all)
    lines += ["", _verdict(doc, expect_drained)]
    return lines


def _in_flight_lines(f: dict, show_all: bool) -> list[str]:
    """The groups still in flight at the end (none: nothing to say)."""
    if not f["groups"]:
        return []
    owners = ", ".join(f"{n} {o.lower()}" for o, n in f["by_owner"].items())
    lines = ["", f"in flight at the end: {f['groups']} group(s) ({owners}), taken and neither "
                 "trained nor dropped"]
    stalled = f["sealed_not_finished"]
    if stalled:
        lines.append(f"  {len(stalled)} admitted group(s) with every rollout sealed, never finished "
                     "(a restore finishes them: they come back to train):")
        lines += render.capped_lines((f"    group {g}" for g in stalled), show_all)
    return lines


def _violation_text(v: dict) -> str:
    at = f"trained at step {v['trained_step']} (LSN {v['trained_lsn']})"
    if "index" in v:
        return f"{v['check']}: group {v['group_id']} rollout {v['index']} sealed {v['seals']} times, {at}"
    return (f"{v['check']}: group {v['group_id']} ({v['rollouts']} rollouts) {at} with rollout(s) "
            f"{', '.join(map(str, v['unsealed']))} unsealed")


def _rollout_lines(r: dict, show_all: bool) -> list[str]:
    """The rollout figures of groups admitted with rollouts=N (none when there are none)."""
    if not (r["sealed"] or r["failed"] or r["groups_trained"] or r["violations"]):
        return []
    lines = ["", "rollouts (groups admitted with rollouts=N)"]
    lines += render.keyvalues([
        ("sealed", r["sealed"]), ("regenerated", f"{r['regenerated']} (sealed at an attempt > 0)"),
        ("failed", r["failed"]),
        ("abandoned by restores", f"{r['abandoned_on_restore']} (rollout_failed abandoned_on_restore)"),
        ("prefix tokens kept", f"{r['tokens_kept']} (continued by resumes from rollout_progress)"),
        ("prefix tokens regenerated", f"{r['tokens_regenerated']} (prefixes a resume ended without "
                                      "continuing them)"),
        ("groups trained", r["groups_trained"]),
        ("no rollout trained twice", "FAIL" if any("index" in v for v in r["violations"]) else "ok"),
        ("all N sealed when trained", "FAIL" if any("unsealed" in v for v in r["violations"]) else "ok")],
        indent="  ")
    if r["violations"]:
        lines += render.capped_lines((f"  {_violation_text(v)}" for v in r["violations"]), show_all)
    lines += [f"  not counted: {x}" for x in r["not_counted"]]
    return lines


def _verdict(doc: dict, expect_drained: bool = False) -> str:
    t = doc["totals"]
    if doc["clean"]:
        once = "no row trained twice, no row lost" + (
            ", no rollout trained twice or unsealed" if doc["rollouts"]["groups_trained"] else "")
        if doc["drained"]:
            return f"CLEAN: {once}"
        flying = f"{doc['in_flight']['groups']} group(s) still in flight"
        if expect_drained:
            return f"NOT DRAINED: {flying}; {once}"
        return f"CLEAN: {once}; {flying} (--expect-drained fails a run that has ended with groups in flight)"
    found = f"{t['trained_more_count']} row(s) trained more than once, {t['lost_count']} row(s) lost"
    if doc["rollouts"]["violations"]:
        found += f", {len(doc['rollouts']['violations'])} rollout violation(s)"
    if doc["complete"]:
        return f"PROBLEMS: {found}"
    return (f"NOT COVERED: {len(doc['not_covered'])} part(s) of the journal could not be read "
            f"({doc['mode']}), so the rows they held are unaudited; in what was read: {found} "
            "(`journal-inspect verify` shows the damage)")


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    rep = audit(src.path, src.mode, progress=Progress, reader=src.reader)
    doc = rep.to_dict()
    if args.json:
        render.json_document(doc, sys.stdout)
    else:
        render.text(render_report(doc, args.show_all, args.expect_drained), sys.stdout)
    return 0 if rep.clean and (rep.drained or not args.expect_drained) else PROBLEMS
