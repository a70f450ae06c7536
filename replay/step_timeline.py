"""`timeline`: owner counts after each training step, as a table or (`--png`) a plot.

A step's row is the state after the last commit holding a `trained(step=S)`
event: in flight (RESERVED + ADMITTED), replay, spare, trained and dropped so
far, and how many groups step S trained. One fold over the active history;
one small row per step is kept. The plot needs matplotlib (the `plot` extra).
"""

from __future__ import annotations

from typing import TextIO

from journal import Owner, Trained

from . import output, tables
from .inspect_source import InspectError, Source
from .walk import history, Fold

COLUMNS = ("step", "lsn", "in_flight", "reserved", "admitted", "replay", "spare", "trained", "dropped",
           "trained_at_step")
MISSING_MATPLOTLIB = ("--png needs matplotlib, which is not installed: pip install "
                      "'ownership-journal[plot]' (or pip install matplotlib)")


def steps(src: Source) -> tuple[list[dict], Fold]:
    reader = src.need_journal("timeline")
    fold = Fold(tolerant=src.mode == "salvage")
    counts = fold.state.counts
    rows: dict[int, dict] = {}
    bar = src.progress("timeline")
    try:
        for rec in bar.records(history(reader), src.sizes):
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
    finally:
        bar.close()
    return list(rows.values()), fold


def plot(rows: list[dict], path: str, title: str) -> None:
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
    bottom.legend(loc="upper left")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise InspectError(f"--png {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def command(src: Source, args, out: TextIO) -> int:
    if args.png:  # fail before the scan when matplotlib is missing
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InspectError(MISSING_MATPLOTLIB) from None
    rows, fold = steps(src)
    if args.png:
        plot(rows, args.png, f"owners per training step: {src.path}")
    if args.json:
        output.json_document({"path": src.path, "end_lsn": fold.state.lsn, "steps": rows,
                              "png": args.png}, out)
        return 0
    if not rows:
        out.write("no training step on the active history yet (no trained event)\n")
        return 0
    shown = [r for i, r in enumerate(rows) if i % args.every == 0 or i == len(rows) - 1]
    lines = tables.table(["step", "LSN", "in flight", "reserved", "admitted", "replay", "spare",
                          "trained", "dropped", "trained at step"],
                         [[r[c] for c in COLUMNS] for r in shown])
    if args.png:
        lines += ["", f"plot written to {args.png}"]
    output.text(lines, out)
    return 0
