"""`journal-inspect steps` (alias `timeline`): owner counts after each training step, as a
table or (`--png`) a plot.

A step's row is the state after the last commit holding a `trained(step=S)`
event: in flight (RESERVED + ADMITTED), replay, spare, trained and dropped so
far, and how many groups step S trained. One fold over the active history;
one small row per step is kept. The plot needs matplotlib (the `plot` extra).
"""

from __future__ import annotations

import sys

from journal import Owner, Trained

from ..walk import Fold, active_lineage, history_bytes
from . import options, render
from .source import InspectError, Source, open_source

HELP = "owner counts per training step as a table (--png: a plot); alias: timeline"
DESCRIPTION = (
    "Owner counts after each training step (the last commit of a `trained(step=S)`): in "
    "flight (reserved + admitted), replay, spare, trained and dropped so far, and how many "
    "groups the step trained, and the checkpoints and restores at that step. --png draws "
    "them, restores and checkpoints as vertical lines (needs matplotlib: pip install "
    "'ownership-journal[plot]').")
EPILOG = ("examples:\n  journal-inspect steps runs/exp1/journal\n"
          "  journal-inspect steps runs/exp1/journal --every 100\n"
          "  journal-inspect steps runs/exp1/journal --png owners.png")

COLUMNS = ("step", "lsn", "in_flight", "reserved", "admitted", "replay", "spare", "trained", "dropped",
           "trained_at_step")
MISSING_MATPLOTLIB = ("--png needs matplotlib, which is not installed: pip install "
                      "'ownership-journal[plot]' (or pip install matplotlib)")


def add_arguments(parser) -> None:
    parser.add_argument("--png", metavar="FILE", help="also draw the counts into FILE (needs matplotlib)")
    parser.add_argument("--every", type=options.positive, default=1, metavar="N",
                        help="show every N-th step in the table (the last step is always shown)")


def steps(src: Source) -> tuple[list[dict], Fold]:
    reader = src.reader
    fold = Fold(tolerant=src.mode == "salvage")
    counts = fold.state.counts
    rows: dict[int, dict] = {}
    for rec in src.scan("steps", reader.records(), history_bytes(reader)):
        trained = [ev for ev in rec.commit.events if type(ev) is Trained]
        if not fold.add(rec) or not trained:
            continue
        for ev in trained:
            row = rows.get(ev.step)
            if row is None:
                row = rows[ev.step] = {"step": ev.step, "trained_at_step": 0}
            row["trained_at_step"] += len(ev.groups)
            row.update(lsn=rec.commit.lsn,
                       in_flight=counts[Owner.RESERVED] + counts[Owner.ADMITTED],
                       reserved=counts[Owner.RESERVED], admitted=counts[Owner.ADMITTED],
                       replay=counts[Owner.REPLAY], spare=counts[Owner.SPARE],
                       trained=counts[Owner.TRAINED], dropped=counts[Owner.DROPPED])
    return list(rows.values()), fold


def marks(src: Source, fold: Fold) -> list[dict]:
    """Where the plot marks checkpoints and restores, by training step: every committed
    checkpoint of the active history, and every restore (a branch of the active history) at the
    step of the checkpoint it resumed from (0: it restored the empty state)."""
    committed = sorted(fold.state.committed_checkpoints.items(), key=lambda kv: kv[1])
    out = [{"kind": "checkpoint", "step": step, "lsn": lsn, "timeline": None} for step, lsn in committed]
    for tl in active_lineage(src.reader)[1:]:
        step = max((s for s, lsn in committed if lsn <= tl.branch_lsn), default=0)
        out.append({"kind": "restore", "step": step, "lsn": tl.branch_lsn, "timeline": tl.timeline})
    return out


def plot(rows: list[dict], marked: list[dict], path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InspectError(MISSING_MATPLOTLIB) from None
    x = [r["step"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for key in ("in_flight", "replay", "spare"):
        top.plot(x, [r[key] for r in rows], label=key.replace("_", " "))
    top.set_ylabel("groups now")
    top.legend(loc="upper left")
    top.set_title(title)
    for key in ("trained", "dropped"):
        bottom.plot(x, [r[key] for r in rows], label=f"{key} so far")
    bottom.set_ylabel("groups so far")
    bottom.set_xlabel("training step")
    for m in marked:
        restore = m["kind"] == "restore"
        for ax in (top, bottom):
            ax.axvline(m["step"], color="tab:red" if restore else "0.7", linestyle="-" if restore else ":",
                       linewidth=1.2 if restore else 0.8, zorder=0)
        if restore:
            top.annotate(f"restore -> timeline {m['timeline']}", (m["step"], 1), xycoords=("data", "axes fraction"),
                         rotation=90, va="top", ha="right", fontsize=7, color="tab:red")
    bottom.legend(loc="upper left")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise InspectError(f"--png {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    out = sys.stdout
    if args.png:  # fail before the scan when matplotlib is missing
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InspectError(MISSING_MATPLOTLIB) from None
    rows, fold = steps(src)
    marked = marks(src, fold)
    if args.png:
        plot(rows, marked, args.png, f"owners per training step: {src.path} "
                                     "(dotted: checkpoints, red: restores)")
    if args.json:
        render.json_document({"path": src.path, "end_lsn": fold.state.lsn, "steps": rows,
                              "marks": marked, "png": args.png}, out)
        return 0
    if not rows:
        out.write("no training step on the active history yet (no trained event)\n")
        return 0
    shown = [r for i, r in enumerate(rows) if i % args.every == 0 or i == len(rows) - 1]
    at_step: dict[int, list[str]] = {}
    for m in marked:
        at_step.setdefault(m["step"], []).append(
            "checkpoint" if m["kind"] == "checkpoint" else f"restore -> timeline {m['timeline']}")
    lines = render.table(["step", "LSN", "in flight", "reserved", "admitted", "replay", "spare",
                          "trained", "dropped", "trained at step", "marks"],
                         [[r[c] for c in COLUMNS] + [", ".join(at_step.get(r["step"], []))] for r in shown])
    if args.png:
        lines += ["", f"plot written to {args.png} (dotted lines: checkpoints, red lines: restores)"]
    render.text(lines, out)
    return 0
