"""`journal-inspect group ID`: one group's whole history, on the active history and every dead
tail, marking which branch each event is on. It streams, keeping only the group's events."""

from __future__ import annotations

import sys

from journal.kinds import KIND_OF, handlers

from ..inspection import dead_branches, dead_bytes, dead_records, history_bytes
from . import render
from .event_rows import LINE_HEADER, event_dict, event_line
from .source import PROBLEMS, open_source

HELP = "one group's whole history, on every branch"
DESCRIPTION = (
    "Every event that names the group, on the active history and on every dead tail, "
    "with LSNs and the branch each is on; its dataset row (idx, task, epoch, fingerprint); "
    "its owner at the end of the active "
    "history; the spare that replaced it, if any; for a group admitted with rollouts=N, each "
    "rollout's attempts on the active history (failed, with the reason, or sealed, with the "
    "data-plane locator) and the latest prefix each recorded (rollout_progress: tokens, turn, "
    "locator). Exit 1 if the group never appears.")
EPILOG = ("examples:\n  journal-inspect group runs/exp1/journal 4711\n"
          "  journal-inspect group runs/exp1/journal 4711 --json")

def add_arguments(parser) -> None:
    parser.add_argument("group_id", type=int, metavar="ID", help="the group id")


class _GroupScan:
    """What the records say of one group: its events (as `event_dict`s and as lines), its row,
    its owner at the end of the active history, and the spares that replaced it."""

    def __init__(self, gid: int):
        self.gid = gid
        self.events: list[dict] = []
        self.lines: list[str] = []
        self.row = None
        self.owner = None
        self.replaced_by: list[dict] = []
        self._replacing = handlers({"admitted": self._admitted})  # the spares that replaced it

    def _admitted(self, ev, rec, branch: str) -> None:
        if ev.replaces == self.gid:
            self.replaced_by.append({"group_id": ev.groups[0] if ev.groups else None, "lsn": rec.commit.lsn,
                                     "timeline": rec.timeline, "branch": branch})

    def scan(self, records, active: bool) -> None:
        gid = self.gid
        for rec in records:
            branch = "active" if active else f"dead tail of timeline {rec.timeline}"
            for i, ev in enumerate(rec.commit.events):
                replacing = self._replacing.get(type(ev))
                if replacing is not None:
                    replacing(ev, rec, branch)
                kind = KIND_OF[type(ev)]
                if gid not in kind.groups(ev):
                    continue
                d = event_dict(rec, i, ev)
                d["branch"] = branch
                row = [g for g in kind.takes(ev) if g.group_id == gid]
                if row:
                    g = row[0]
                    self.row = {"idx": g.idx, "task_name": g.task_name, "epoch": g.epoch,
                                "fingerprint": g.fingerprint.hex() if g.fingerprint else None}
                    d["rows"] = [x for x in d["rows"] if x["group_id"] == gid]
                    d["groups"] = [gid]
                elif kind.rollouts(ev):
                    d["rollouts"] = [r for r in d["rollouts"] if r["group_id"] == gid]
                if branch == "active" and kind.to is not None:
                    self.owner = kind.to  # where the event left it
                self.events.append(d)
                self.lines.append(event_line(rec, ev, note="" if branch == "active" else f"[{branch}]"))


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    reader = src.reader
    out = sys.stdout
    gid = args.group_id
    found = _GroupScan(gid)
    found.scan(src.scan("group: active history", reader.records(), history_bytes(reader)), True)
    branches = dead_branches(reader)
    dead = (rec for b in branches for rec in dead_records(reader, b))
    found.scan(src.scan("group: dead tails", dead, dead_bytes(reader, branches)), False)
    if not found.events:
        sys.stderr.write(f"journal-inspect: group {gid} does not appear in {src.path}\n")
        if args.json:
            render.json_document({"group_id": gid, "found": False, "events": []}, out)
        return PROBLEMS
    owner = found.owner
    rollouts = rollout_attempts(e for e in found.events if e["branch"] == "active")
    doc = {"group_id": gid, "found": True, "row": found.row,
           "owner": owner.name if owner is not None else None,
           "on_active_history": owner is not None, "replaced_by": found.replaced_by, "rollouts": rollouts,
           "events": found.events}
    if args.json:
        render.json_document(doc, out)
    else:
        render.text(_text(found, rollouts), out)
    return 0


def _text(found: _GroupScan, rollouts: list[dict] | None) -> list[str]:
    row, owner, replaced_by = found.row, found.owner, found.replaced_by
    head = [("group", found.gid),
            ("row", ", ".join(f"{k}={v}" for k, v in (row or {}).items() if v is not None) or "unknown "
             "(its taken event was not read)"),
            ("owner", (owner.name + " (end of the active history)") if owner is not None
             else "not on the active history (only on a dead tail)")]
    if replaced_by:
        head.append(("replaced by", ", ".join(f"group {r['group_id']} at LSN {r['lsn']} ({r['branch']})"
                                              for r in replaced_by)))
    text = render.keyvalues(head) + ["", LINE_HEADER] + found.lines
    if rollouts is not None:
        text += ["", f"rollouts ({len(rollouts)}, on the active history)"]
        text += render.table(["index", "sealed", "attempt", "attempts"],
                             [[r["index"], "yes" if r["sealed"] else "no", r["attempt"],
                               "; ".join(map(_attempt_text, r["attempts"]))] for r in rollouts], indent="  ")
    return text


def rollout_attempts(events) -> list[dict] | None:
    """Per rollout of a group admitted with rollouts=N, from its events (`event_dict`s, in
    order): its attempts, each with what became of it (sealed: LSN, locator, policy version;
    failed: LSN, reason; neither: still out) and its latest prefix (`progress`: LSN, locator,
    tokens, turn, policy version), whether it is sealed and its current attempt.
    None for a group admitted without rollouts=."""
    table = None
    for e in events:
        if e["kind"] == "admitted" and e["rollouts"] is not None:
            table = [{"index": i, "sealed": False, "attempt": 0, "attempts": [{"attempt": 0}]}
                     for i in range(e["rollouts"])]
        elif table is not None and e["kind"] in ("rollout_sealed", "rollout_failed", "rollout_progress"):
            for ref in e["rollouts"]:
                if not 0 <= ref["index"] < len(table):
                    continue
                r = table[ref["index"]]
                if r["attempts"][-1]["attempt"] != ref["attempt"]:
                    r["attempts"].append({"attempt": ref["attempt"]})
                a = r["attempts"][-1]
                if e["kind"] == "rollout_progress":  # the attempt's latest prefix
                    a["progress"] = {"lsn": e["lsn"], "locator": ref["locator"], "tokens": e["tokens"],
                                     "turn": e["turn"], "policy_version": e["policy_version"]}
                elif e["kind"] == "rollout_sealed":
                    a.update(sealed_lsn=e["lsn"], locator=ref["locator"], policy_version=e["policy_version"])
                    r["sealed"] = True
                else:
                    a.update(failed_lsn=e["lsn"], reason=e["reason"])
                    r["attempt"] = ref["attempt"] + 1
                    r["attempts"].append({"attempt": r["attempt"]})
    return table


def _attempt_text(a: dict) -> str:
    p = a.get("progress")
    prefix = "" if p is None else (f", {p['tokens']} tokens" + (f" turn {p['turn']}" if p["turn"] is not None else "")
                                   + f" at LSN {p['lsn']} ({p['locator']})")
    if "sealed_lsn" in a:
        return f"{a['attempt']}: sealed at LSN {a['sealed_lsn']}" + (
            f" ({a['locator']})" if a["locator"] is not None else "") + prefix
    if "failed_lsn" in a:
        return f"{a['attempt']}: failed at LSN {a['failed_lsn']} ({a['reason']})" + prefix
    return f"{a['attempt']}: out" + prefix
