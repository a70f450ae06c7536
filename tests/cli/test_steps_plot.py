"""The picture `journal-inspect steps --png` draws (matplotlib, the `plot` extra): every
checkpoint and restore marked, no restore label over another, the live counts readable on a
long asynchronous run (they alternate from one step to the next), and only the series that
change drawn. The figures are checked through their artists, before they are saved."""

from __future__ import annotations

import itertools
import re

import matplotlib
import pytest

import replay.cli
from replay.cli import steps_plot

from tests.support.cli_journals import clean_run

matplotlib.use("Agg")

# the demo's restores (journal-demo, seed 0, 256 steps): four of them 4 steps apart at 136-148
DEMO_RESTORES = [8, 16, 20, 28, 36, 72, 116, 124, 136, 140, 144, 148, 184]


def demo_like(steps: int = 256, restores=DEMO_RESTORES, ckpt_every: int = 4) -> tuple[list[dict], list[dict]]:
    """Rows and marks shaped like the demo's: 16 groups trained a step, one step of
    generation ahead, so in flight and replay alternate between two values every step; spare
    fills once; two groups dropped."""
    rows = []
    for s in range(1, steps + 1):
        rows.append({"step": s, "lsn": 100 * s, "in_flight": 32 if s % 2 else 16, "reserved": 16,
                     "admitted": 16 if s % 2 else 0, "replay": 0 if s % 2 else 16, "spare": 15 if s > 30 else 0,
                     "trained": 16 * s, "dropped": (s > 30) + (s > 200), "trained_at_step": 16})
    marks = [{"kind": "checkpoint", "step": s, "lsn": 100 * s, "timeline": None}
             for s in range(ckpt_every, steps + 1, ckpt_every)]
    marks += [{"kind": "restore", "step": s, "lsn": 100 * s + 1 + i, "timeline": i + 2}
              for i, s in enumerate(restores)]
    return rows, marks


@pytest.fixture
def figure():
    made = []

    def draw(rows, marks):
        fig = steps_plot.draw(rows, marks, "owners per training step: test")
        fig.canvas.draw()
        made.append(fig)
        return fig

    yield draw
    for fig in made:
        matplotlib.pyplot.close(fig)


def _restore_labels(fig) -> list:
    """The texts naming a restore's timeline ("t14"; "restore -> timeline 14" before)."""
    return [t for ax in fig.axes for t in ax.texts if re.fullmatch(r"(t|.*timeline )\d+", t.get_text())]


def _timeline(label) -> int:
    return int(re.search(r"\d+$", label.get_text()).group())


def _overlapping(boxes) -> list:
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


@pytest.mark.parametrize("steps", [256, 1024])   # the demo's run, and a run 4 times longer
def test_restore_labels_do_not_overlap(figure, steps):
    """Each restore's label is drawn (no label is left out here), over no other label and no
    restore's triangle."""
    rows, marks = demo_like(steps)
    fig = figure(rows, marks)
    renderer = fig.canvas.get_renderer()
    labels = _restore_labels(fig)
    assert sorted(_timeline(t) for t in labels) == [i + 2 for i in range(len(DEMO_RESTORES))]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
    assert not _overlapping(boxes)
    triangles = [("triangle", line.get_window_extent(renderer))
                 for line in fig.axes[0].lines if line.get_gid() == "restore"]
    assert len(triangles) == len(DEMO_RESTORES)
    assert not [(a, b) for a, b in _overlapping(boxes + triangles) if a != b]


def test_every_restore_and_checkpoint_is_marked_when_labels_crowd(figure):
    """80 restores over 3000 steps, in bursts of 8 within 8 steps: labels that find no room
    are left out (the header says how many), but every restore keeps its triangle in the strip
    and its line in each panel."""
    restores = [burst + k for burst in range(0, 3000, 300) for k in range(8)]
    rows, marks = demo_like(steps=3000, restores=restores)
    fig = figure(rows, marks)
    strip, *panels = fig.axes
    triangles = sorted(x for line in strip.lines if line.get_gid() == "restore" for x in line.get_xdata())
    assert triangles == restores
    ticks = [x for line in strip.lines if line.get_gid() == "checkpoint" for x in line.get_xdata()]
    assert list(ticks) == [m["step"] for m in marks if m["kind"] == "checkpoint"]
    for ax in panels:
        assert sorted(line.get_xdata()[0] for line in ax.lines if line.get_gid() == "restore") == restores
    labels = _restore_labels(fig)
    renderer = fig.canvas.get_renderer()
    assert not _overlapping([(t.get_text(), t.get_window_extent(renderer)) for t in labels])
    left_out = len(restores) - len(labels)
    assert left_out > 0
    assert f"{left_out} labels left out" in " ".join(t.get_text() for t in fig.texts)


def _drawn(fig) -> dict:
    """series -> the y values of its line, over the panels (a series by its legend label
    without the explanation in parentheses)."""
    return {label.split(" (")[0]: list(handle.get_ydata()) for ax in fig.axes
            for handle, label in zip(*ax.get_legend_handles_labels())}


def test_only_the_series_that_change_are_drawn(figure):
    rows, marks = demo_like()
    fig = figure(rows, marks)
    assert set(_drawn(fig)) == {"in flight", "replay", "spare", "dropped so far"}
    header = " ".join(t.get_text() for t in fig.texts)
    assert "trained at the step: 16" in header    # the same at every step: said, not drawn
    rows[-1]["trained_at_step"] = 14               # a short last batch: still said, with its step
    assert "trained at the step: 16 (14 at step 256)" in " ".join(t.get_text() for t in figure(rows, marks).texts)


def test_live_counts_that_alternate_every_step_are_drawn_as_their_mean_and_range(figure):
    rows, marks = demo_like()
    fig = figure(rows, marks)
    drawn = _drawn(fig)
    for label, low, high in (("in flight", 16, 32), ("replay", 0, 16)):
        ys = drawn[label]
        assert len(ys) <= steps_plot.MAX_POINTS and max(ys) - min(ys) < 1, (label, ys)   # no zigzag
        assert abs(ys[0] - (low + high) / 2) < 1
        (band,) = [c for c in fig.axes[1].collections
                   if list(c.get_facecolor()[0][:3]) == list(matplotlib.colors.to_rgb(_color(fig, label)))]
        y_band = band.get_paths()[0].vertices[:, 1]
        assert min(y_band) == low and max(y_band) == high


def _color(fig, series: str):
    handles, labels = fig.axes[1].get_legend_handles_labels()
    return handles[[label.split(" (")[0] for label in labels].index(series)].get_color()


def test_png_of_a_journal(tmp_path, capsys):
    """The command end to end on a real journal, --every included: the file is a PNG."""
    journal = str(tmp_path / "journal")
    clean_run(journal)
    png = tmp_path / "owners.png"
    assert replay.cli.main(["steps", journal, "--every", "4", "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {png}" in capsys.readouterr().out
