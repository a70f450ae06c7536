"""The picture of `journal-inspect steps --png`: owner counts per training step, with every
checkpoint and restore marked.

From top to bottom:
- a strip of marks: a tick per checkpoint; a red triangle per restore at the step it resumed
  from, labelled with the timeline it started. Labels are stacked in lanes so that none
  overlaps another; a label with no room left in `MAX_LANES` lanes is left out (its triangle
  and its line stay) and the figure says how many.
- "live groups after the step": in flight (reserved + admitted), replay (finished, not
  trained yet) and spare. These alternate from one step to the next in an asynchronous
  pipeline, so past `MAX_POINTS` steps each line is the mean over bins of an even number
  of steps and a band spans each bin's minimum to maximum.
- one panel per outcome that changes: groups trained at the step, groups dropped so far.
A series that does not vary over the run is not drawn: the header names it with its value.
Restores are also red lines across the data panels.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter

from .source import InspectError

MISSING_MATPLOTLIB = ("--png needs matplotlib, which is not installed: pip install "
                      "'ownership-journal[plot]' (or pip install matplotlib)")
MAX_POINTS = 60        # steps drawn one by one; past that, binned
EXCEPTIONS = 3         # steps at which a series may differ from its usual value and not be drawn,
                       # and at most one in EXCEPTIONS_PER steps
EXCEPTIONS_PER = 20
NOTE_WIDTH = 150       # characters of a line of the figure's header
MAX_LANES = 4          # lanes of restore labels
LABEL_SIZE = 7.5       # points
LABEL_GAP = 3.0        # pixels between two labels in a lane
MARKER_SIZE = 4.0      # points: a restore's triangle
RESTORE_COLOR = "tab:red"
WIDTH, DPI = 10.0, 100                  # inches, dots per inch
LEFT, RIGHT, TOP, BOTTOM = 0.9, 0.25, 0.85, 0.5   # margins, inches
GAP = 0.4                               # between two panels (a legend's row), inches
MARKER_HALF = MARKER_SIZE * DPI / 72 / 2  # pixels
LABEL_OFFSET = MARKER_HALF + 1.5        # pixels from a restore's step to its label
LIVE = (("in_flight", "in flight (reserved + admitted)", "tab:blue"),
        ("replay", "replay (finished, not trained yet)", "tab:orange"),
        ("spare", "spare", "tab:green"))
OUTCOMES = (("trained_at_step", "trained at the step", "tab:purple"),
            ("dropped", "dropped so far", "tab:brown"))


def bin_width(n: int) -> int:
    """Steps per bin: 1 up to MAX_POINTS steps, else the smallest even width that leaves at
    most MAX_POINTS bins (even, so an every-other-step alternation averages out)."""
    return 1 if n <= MAX_POINTS else 2 * math.ceil(n / (2 * MAX_POINTS))


def binned(xs: list[int], ys: list[int], width: int) -> tuple[list[float], list[float], list[int], list[int]]:
    """Per bin of `width` consecutive rows: mean step, mean value, minimum, maximum."""
    cx, mean, lo, hi = [], [], [], []
    for i in range(0, len(xs), width):
        bx, by = xs[i:i + width], ys[i:i + width]
        cx.append(sum(bx) / len(bx))
        mean.append(sum(by) / len(by))
        lo.append(min(by))
        hi.append(max(by))
    return cx, mean, lo, hi


def varying(rows: list[dict], keys) -> tuple[list[tuple], list[str]]:
    """The (key, label, color) of `keys` worth a line: those whose value differs from its most
    common one at more than a few steps (EXCEPTIONS); and a text for each of the others, naming its
    value and the steps where it differs."""
    drawn, described = [], []
    for key, label, color in keys:
        values = [r[key] for r in rows]
        if not values:
            continue
        usual = Counter(values).most_common(1)[0][0]
        exceptions = [(r["step"], r[key]) for r in rows if r[key] != usual]
        if len(exceptions) > min(EXCEPTIONS, len(values) // EXCEPTIONS_PER):
            drawn.append((key, label, color))
        else:
            described.append(f"{label}: {usual}" + (" (" + ", ".join(f"{v} at step {s}" for s, v in exceptions)
                                                     + ")" if exceptions else ""))
    return drawn, described


def label_lanes(starts: list[float], widths: list[float]) -> list[int | None]:
    """Greedy lanes for labels that start at the pixel `starts` (ascending) and are `widths`
    wide: each takes the lowest lane whose last label ends before it starts, or None when all
    MAX_LANES lanes are taken there."""
    ends: list[float] = []
    lanes: list[int | None] = []
    for start, width in zip(starts, widths):
        lane = next((i for i, end in enumerate(ends) if end + LABEL_GAP <= start), None)
        if lane is None and len(ends) < MAX_LANES:
            lane = len(ends)
            ends.append(0.0)
        if lane is not None:
            ends[lane] = start + width
        lanes.append(lane)
    return lanes


def require_matplotlib():
    """matplotlib, or an `InspectError` naming the extra that brings it."""
    try:
        import matplotlib
    except ImportError:
        raise InspectError(MISSING_MATPLOTLIB) from None
    return matplotlib


def _pyplot():
    require_matplotlib().use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _draw_series(ax, rows: list[dict], series: list[tuple], width: int, *, running_total: bool = False) -> None:
    xs = [r["step"] for r in rows]
    for key, label, color in series:
        ys = [r[key] for r in rows]
        if running_total:   # a running total: drawn as it is, a step up where it changed
            ax.step(xs, ys, where="post", color=color, label=label)
        elif width == 1:
            ax.plot(xs, ys, color=color, label=label, marker="." if len(xs) <= 30 else None)
        else:
            cx, mean, lo, hi = binned(xs, ys, width)
            ax.fill_between(cx, lo, hi, color=color, alpha=0.18, linewidth=0)
            ax.plot(cx, mean, color=color, label=label)
    if series:
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=len(series), fontsize=8, frameon=False,
                  borderaxespad=0.1)
    ax.grid(axis="y", color="0.92")


def _lanes(fig, restores: list[dict], xlim: tuple[float, float]) -> tuple[list[str], list[int | None]]:
    """The restore labels and their lanes, from the labels' widths in pixels at the axes'
    fixed width."""
    from matplotlib.font_manager import FontProperties
    renderer, font = fig.canvas.get_renderer(), FontProperties(size=LABEL_SIZE)
    texts = [f"t{m['timeline']}" for m in restores]
    widths = [renderer.get_text_width_height_descent(t, font, ismath=False)[0] for t in texts]
    px_per_step = (WIDTH - LEFT - RIGHT) * DPI / (xlim[1] - xlim[0])
    # a label's extent: from its triangle's left edge to the end of its text
    return texts, label_lanes([(m["step"] - xlim[0]) * px_per_step - MARKER_HALF for m in restores],
                              [MARKER_HALF + LABEL_OFFSET + w for w in widths])


def _axes(fig, lanes: int, heights: list[float], top: float) -> tuple:
    """The marks strip, `lanes` label lanes high, and a data panel per height (inches) under
    it, sharing the step axis, `top` inches below the figure's top; the figure's height fits."""
    heights = [0.3 + 0.17 * max(lanes, 1)] + heights
    fig.set_size_inches(WIDTH, sum(heights) + GAP * (len(heights) - 1) + top + BOTTOM)
    height = fig.get_size_inches()[1]
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights, hspace=GAP * len(heights) / sum(heights),
                            left=LEFT / WIDTH, right=1 - RIGHT / WIDTH, top=1 - top / height,
                            bottom=BOTTOM / height)
    strip = fig.add_subplot(grid[0])
    return strip, [fig.add_subplot(grid[i], sharex=strip) for i in range(1, len(heights))]


def restore_rows(lanes: list[int | None]) -> list[int]:
    """The strip row of each restore's triangle: its label's lane, one up when labels were
    left out, whose triangles take row 0 (there they may overlap each other, never a label)."""
    shift = 1 if None in lanes else 0
    return [0 if lane is None else lane + shift for lane in lanes]


def _draw_marks(strip, checkpoints: list[int], restores: list[dict], texts: list[str], lanes: list) -> None:
    rows = restore_rows(lanes)
    strip.set_ylim(-0.9, max(rows, default=0) + 1.1)
    strip.set_yticks([-0.4, 0.5], ["checkpoints", "restores"], fontsize=8)
    strip.tick_params(axis="x", labelbottom=False)
    for side in ("top", "right", "left"):
        strip.spines[side].set_visible(False)
    strip.plot(checkpoints, [-0.4] * len(checkpoints), linestyle="none", marker="|", markersize=7,
               color="0.45", gid="checkpoint")
    for m, text, lane, row in zip(restores, texts, lanes, rows):
        y = row + 0.5
        strip.plot([m["step"]], [y], linestyle="none", marker=">", markersize=MARKER_SIZE, color=RESTORE_COLOR,
                   gid="restore")
        if lane is not None:
            strip.annotate(text, (m["step"], y), xytext=(LABEL_OFFSET, 0), textcoords="offset pixels",
                           va="center", ha="left", fontsize=LABEL_SIZE, color=RESTORE_COLOR,
                           gid="restore-label")


def _notes(rows: list[dict], checkpoints: int, restores: int, omitted: int, described: list[str]) -> list[str]:
    lines = [(f"{len(rows)} steps, {rows[-1]['trained']} groups trained, {rows[-1]['dropped']} dropped"
              if rows else "no training step yet")
             + f" · {checkpoints} checkpoints, {restores} restores (label: the timeline each started"
             + (f"; {omitted} labels left out, too close to others)" if omitted else ")")]
    if bin_width(len(rows)) > 1:
        lines.append(f"lines: the mean over {bin_width(len(rows))} steps, bands: their range")
    if described:
        lines.append("not drawn, the same at (almost) every step: " + "; ".join(described))
    return [wrapped for line in lines for wrapped in textwrap.wrap(line, NOTE_WIDTH, subsequent_indent="  ")]


def draw(rows: list[dict], marked: list[dict], title: str):
    """The figure (matplotlib's); `plot` saves it."""
    plt = _pyplot()
    restores = sorted((m for m in marked if m["kind"] == "restore"), key=lambda m: (m["step"], m["lsn"]))
    checkpoints = [m["step"] for m in marked if m["kind"] == "checkpoint"]
    every = [r["step"] for r in rows] + [m["step"] for m in marked] or [0, 1]
    pad = max(0.5, (max(every) - min(every)) * 0.01)
    xlim = (min(every) - pad, max(every) + pad)
    fig = plt.figure(figsize=(WIDTH, 1), dpi=DPI)
    texts, lanes = _lanes(fig, restores, xlim)
    live, live_described = varying(rows, LIVE)
    outcomes, outcomes_described = varying(rows, OUTCOMES)
    notes = _notes(rows, len(checkpoints), len(restores), lanes.count(None), live_described + outcomes_described)
    panels = ([(live, "live groups\nafter the step", 2.6)] if live or not outcomes else []) \
        + [([series], "", 1.1) for series in outcomes]
    strip, axes = _axes(fig, max(restore_rows(lanes), default=0) + 1,
                        [h for _, _, h in panels], 0.45 + 0.155 * len(notes))
    strip.set_xlim(*xlim)
    _draw_marks(strip, checkpoints, restores, texts, lanes)
    for ax, (series, ylabel, _) in zip(axes, panels):
        _draw_series(ax, rows, series, bin_width(len(rows)), running_total=series[:1] == [OUTCOMES[1]])
        ax.set_ylabel(ylabel)
        if series[:1] != [OUTCOMES[0]]:   # counts from 0, but the groups a step trained: their range
            ax.set_ylim(bottom=0)
        for m in restores:
            ax.axvline(m["step"], color=RESTORE_COLOR, linewidth=0.8, alpha=0.55, zorder=0, gid="restore")
        ax.tick_params(axis="x", labelbottom=ax is axes[-1])
    if not (live or outcomes):
        axes[0].text(0.5, 0.5, "no count changes over the run (see above)", transform=axes[0].transAxes,
                     ha="center", va="center", color="0.3")
    axes[-1].set_xlabel("training step")
    height = fig.get_size_inches()[1]
    fig.suptitle(title, x=LEFT / WIDTH, y=1 - 0.08 / height, ha="left", va="top", fontsize=10)
    fig.text(LEFT / WIDTH, 1 - 0.32 / height, "\n".join(notes), ha="left", va="top", fontsize=8, color="0.3",
             linespacing=1.5)
    return fig


def plot(rows: list[dict], marked: list[dict], path: str, title: str) -> None:
    fig = draw(rows, marked, title)
    try:
        fig.savefig(path)
    except OSError as exc:
        raise InspectError(f"--png {path}: {exc.strerror or exc}") from None
    finally:
        _pyplot().close(fig)
