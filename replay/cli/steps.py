"""`journal-inspect steps` (alias `timeline`): owner counts after each training step, as a
table or (`--png`) a plot.

A step's row is the state after the last commit holding a `trained(step=S)`
event: in flight (RESERVED + ADMITTED), replay, spare, trained and dropped so
far, and how many groups step S trained. One fold over the active history;
one small row per step is kept. The plot needs matplotlib (the `plot` extra).
"""

from __future__ import annotations

import bisect
import sys

from journal import JournalError, Owner
from journal.kinds import KIND_OF, checkpoint_marks
from journal.rules import Mark

from ..inspection import Fold, active_lineage, history_bytes
from . import options, render, steps_plot
from .source import Source, open_source

HELP = "owner counts per training step as a table (--png: a plot); alias: timeline"
DESCRIPTION = (
    "Owner counts after each training step (the last commit of a `trained(step=S)`): in "
    "flight (reserved + admitted), replay, spare, trained and dropped so far, and how many "
    "groups the step trained, and the checkpoints and restores at that step (with --every, "
    "a row also lists those of the steps it skipped). --png draws them: every checkpoint "
    "and restore marked, the live groups (binned on long runs), and what the steps trained "
    "and dropped where it changes (needs matplotlib: pip install 'ownership-journal[plot]').")
EPILOG = ("examples:\n  journal-inspect steps runs/exp1/journal\n"
          "  journal-inspect steps runs/exp1/journal --every 100\n"
          "  journal-inspect steps runs/exp1/journal --png owners.png")

COLUMNS = ("step", "lsn", "in_flight", "reserved", "admitted", "replay", "spare", "trained", "dropped",
           "trained_at_step")


def add_arguments(parser) -> None:
    parser.add_argument("--png", metavar="FILE", help="also draw the counts into FILE (needs matplotlib)")
    parser.add_argument("--every", type=options.positive, default=1, metavar="N",
                        help="show every N-th step in the table (the last step is always shown; a row "
                             "lists the checkpoints and restores of the steps before it that are not shown)")


def steps(src: Source) -> tuple[list[dict], Fold]:
    reader = src.reader
    fold = Fold(tolerant=src.mode == "salvage")
    counts = fold.state.counts
    rows: dict[int, dict] = {}
    for rec in src.scan("steps", reader.records(), history_bytes(reader)):
        trained = [ev for ev in rec.commit.events if KIND_OF[type(ev)].to is Owner.TRAINED]
        if not fold.add(rec) or not trained:
            continue
        for ev in trained:  # an event that trains its groups records the step that trained them
            row = rows.get(ev.step)
            if row is None:
                row = rows[ev.step] = {"step": ev.step, "trained_at_step": 0}
            row["trained_at_step"] += len(KIND_OF[type(ev)].groups(ev))
            row.update(lsn=rec.commit.lsn,
                       in_flight=counts[Owner.RESERVED] + counts[Owner.ADMITTED],
                       reserved=counts[Owner.RESERVED], admitted=counts[Owner.ADMITTED],
                       replay=counts[Owner.REPLAY], spare=counts[Owner.SPARE],
                       trained=counts[Owner.TRAINED], dropped=counts[Owner.DROPPED])
    return list(rows.values()), fold


def marks(src: Source, fold: Fold) -> list[dict]:
    """Where the plot marks checkpoints and restores, by training step: every committed
    checkpoint of the active history, and every restore, at the step of the checkpoint it
    resumed from (`_resumed_step`). A restore is a timeline with a parent (a first start's has
    none): on the active history, or off it when a later restore went back to the same point or
    before; either way it happened, and none is left out."""
    committed = sorted(fold.state.committed_checkpoints.items(), key=lambda kv: kv[1])
    out = [{"kind": "checkpoint", "step": step, "lsn": lsn, "timeline": None} for step, lsn in committed]
    for t, tl in sorted(src.reader.timelines.items()):
        if tl.parent:
            out.append({"kind": "restore", "step": _resumed_step(src.reader, tl, committed),
                        "lsn": tl.branch_lsn, "timeline": t})
    return out


def _resumed_step(reader, tl, committed: list[tuple[int, int]]) -> int:
    """The step of the checkpoint that the restore starting timeline `tl` resumed from: the one
    its first commit marks committed again (a resume to a checkpoint's LSN writes its marker
    again: the original is on the dead tail); for a first commit without one (a restore of the
    empty state, or a history that cannot be read there), the newest checkpoint committed at
    or before its branch point on the active history, 0 for none."""
    try:
        first = next(reader.timeline_records(tl.timeline, start_lsn=tl.branch_lsn + 1), None)
    except (JournalError, OSError):
        first = None
    marked = [step for mark, step in checkpoint_marks(first.commit.events) if mark is Mark.COMMITTED] if first else []
    if marked:
        return max(marked)
    return max((s for s, lsn in committed if lsn <= tl.branch_lsn), default=0)


def mark_texts(shown: list[dict], marked: list[dict]) -> list[str]:
    """The marks column of the table's `shown` rows: each row lists the marks from the row
    shown before it (exclusive) to its own step, so a mark between sampled rows (`--every`)
    is still there; a mark past the last row goes to the last row."""
    out: list[list[dict]] = [[] for _ in shown]
    steps = [r["step"] for r in shown]
    for m in marked:
        out[min(bisect.bisect_left(steps, m["step"]), len(shown) - 1)].append(m)
    return [_marks_cell(row["step"], marks) for row, marks in zip(shown, out)]


def _marks_cell(step: int, marks: list[dict]) -> str:
    checkpoints = [m["step"] for m in marks if m["kind"] == "checkpoint"]
    if checkpoints == [step]:
        texts = ["checkpoint"]
    elif len(checkpoints) == 1:
        texts = [f"checkpoint at {checkpoints[0]}"]
    else:
        texts = [f"{len(checkpoints)} checkpoints {checkpoints[0]}-{checkpoints[-1]}"] if checkpoints else []
    restores = [m for m in marks if m["kind"] == "restore"]
    before = [m for m in restores if m["step"] != step]
    here = [m for m in restores if m["step"] == step]
    if before:
        steps = ", ".join(str(s) for s in dict.fromkeys(m["step"] for m in before))
        texts.append(_restores_text(before, f" at {steps}"))
    if here:
        texts.append(_restores_text(here, ""))
    return ", ".join(texts)


def _restores_text(restores: list[dict], where: str) -> str:
    """`restore<where> -> timeline T`, or for several `N restores<where> -> timelines A-B,C`:
    each restore counted, every timeline listed (in runs)."""
    timelines = render.id_list(sorted(m["timeline"] for m in restores), limit=len(restores))
    if len(restores) == 1:
        return f"restore{where} -> timeline {timelines}"
    return f"{len(restores)} restores{where} -> timelines {timelines}"


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    out = sys.stdout
    if args.png:  # fail before the scan when matplotlib is missing
        steps_plot.require_matplotlib()
    rows, fold = steps(src)
    marked = marks(src, fold)
    if args.png:
        steps_plot.plot(rows, marked, args.png, f"owners per training step: {src.path}")
    if args.json:
        render.json_document({"path": src.path, "end_lsn": fold.state.lsn, "steps": rows,
                              "marks": marked, "png": args.png}, out)
        return 0
    if not rows:
        out.write("no training step on the active history yet (no trained event)\n")
        return 0
    shown = [r for i, r in enumerate(rows) if i % args.every == 0 or i == len(rows) - 1]
    lines = render.table(["step", "LSN", "in flight", "reserved", "admitted", "replay", "spare",
                          "trained", "dropped", "trained at step", "marks"],
                         [[r[c] for c in COLUMNS] + [cell] for r, cell in zip(shown, mark_texts(shown, marked))])
    if args.png:
        lines += ["", f"plot written to {args.png}"]
    render.text(lines, out)
    return 0
