"""`journal-inspect steps` marks checkpoints and restores: in the data handed to the plotting
function (the `plot` extra may be missing there; tests/cli/test_steps_plot.py draws), in
`--json`, and in the table, where `--every` must not hide a mark between the rows it shows."""

from __future__ import annotations

import json
import re
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replay.cli
from replay.cli import steps as steps_command

from tests.support.cli_journals import clean_run

# clean_run: checkpoints at steps 2, 4 and 6, a crash after step 7, a resume from step 6 (on
# timeline 2), then steps 7 to 11 with checkpoints at 8 and 10
CHECKPOINT_STEPS = [2, 4, 6, 8, 10]
RESTORES = [(6, 2)]  # (step resumed from, timeline it resumed on)


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("steps") / "journal")
    clean_run(path)
    return path


def _positions(marks: list[dict]) -> tuple[list, list]:
    return ([m["step"] for m in marks if m["kind"] == "checkpoint"],
            [(m["step"], m["timeline"]) for m in marks if m["kind"] == "restore"])


def test_plot_gets_the_checkpoints_and_restores(journal, tmp_path, monkeypatch):
    handed = {}
    monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))
    monkeypatch.setattr(steps_command.steps_plot, "plot", lambda rows, marks, path, title: handed.update(
        rows=rows, marks=marks, path=path))
    png = str(tmp_path / "owners.png")
    assert replay.cli.main(["steps", journal, "--png", png]) == 0
    assert handed["path"] == png
    assert _positions(handed["marks"]) == (CHECKPOINT_STEPS, RESTORES)
    trained_steps = {r["step"] for r in handed["rows"]}
    assert {m["step"] for m in handed["marks"]} <= trained_steps  # on the plot's x axis


def test_marks_in_json_and_text(journal, capsys):
    assert replay.cli.main(["steps", journal, "--json"]) == 0
    assert _positions(json.loads(capsys.readouterr().out)["marks"]) == (CHECKPOINT_STEPS, RESTORES)
    assert replay.cli.main(["steps", journal]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["6"].endswith("checkpoint, restore -> timeline 2") and rows["8"].endswith("checkpoint")
    assert not rows["7"].endswith("checkpoint")


def _marks_column(text: str) -> dict[int, str]:
    """step -> marks cell of `journal-inspect steps` text (the cell is everything after the
    10 numeric columns)."""
    out = {}
    for line in text.splitlines()[2:]:
        fields = line.split(None, 10)
        out[int(fields[0])] = fields[10] if len(fields) > 10 else ""
    return out


def test_every_keeps_the_marks_of_the_rows_it_skips(journal, capsys):
    """--every 4 shows steps 1, 5, 9 and 11: the restore at step 6 and the checkpoints at 2,
    4, 6, 8 and 10 are listed on the next row shown."""
    assert replay.cli.main(["steps", journal, "--every", "4"]) == 0
    assert _marks_column(capsys.readouterr().out) == {
        1: "", 5: "2 checkpoints 2-4", 9: "2 checkpoints 6-8, restore at 6 -> timeline 2",
        11: "checkpoint at 10"}


def _checkpoints_in(cell: str) -> int:
    n = 0
    for part in cell.split(", "):
        if part == "checkpoint" or part.startswith("checkpoint at "):
            n += 1
        elif " checkpoints " in part:
            n += int(part.split()[0])
    return n


def _expand(ranges: str) -> list[int]:
    """[2, 3, 4, 9] for `2-4,9`."""
    out = []
    for part in ranges.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, unique=True).map(sorted), st.integers(1, 7),
       st.lists(st.tuples(st.sampled_from(["checkpoint", "restore"]), st.integers(0, 70)), max_size=20))
def test_every_mark_is_in_exactly_one_shown_row(steps, every, raw_marks):
    rows = [{"step": s} for s in steps]
    shown = [r for i, r in enumerate(rows) if i % every == 0 or i == len(rows) - 1]
    marked = [{"kind": kind, "step": step, "lsn": i, "timeline": i + 2 if kind == "restore" else None}
              for i, (kind, step) in enumerate(raw_marks)]
    cells = steps_command.mark_texts(shown, marked)
    assert len(cells) == len(shown)
    timelines = [t for cell in cells for found in re.findall(r"-> timelines? (\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)", cell)
                 for t in _expand(found)]
    assert sorted(timelines) == sorted(m["timeline"] for m in marked if m["kind"] == "restore")
    counted = sum(int(n or 1) for cell in cells for n in re.findall(r"(?:^|, )(\d+ )?restores? ", cell))
    assert counted == sum(m["kind"] == "restore" for m in marked)
    assert sum(_checkpoints_in(c) for c in cells) == sum(m["kind"] == "checkpoint" for m in marked)
    for row, cell in zip(shown, cells):   # a mark at the row's own step is said without a step
        here = {m["kind"] for m in marked if m["step"] == row["step"]}
        assert bool(re.search(r"restores? ->", cell)) == ("restore" in here)


def _crash_loop_journal(path: str) -> None:
    """A run restored 6 times to LSN 0 (timelines 2-7: it crashed 6 times before its first
    checkpoint, the last time after training step 1 and checkpointing it), then 3 times to that
    checkpoint (timelines 8-10), and it trains step 2. (The first restore after the checkpoint
    continues its timeline: the history after the point is only the marker the resume would
    write again.)"""
    import warnings

    from journal import GroupRef, Journal, JournalWarning
    from replay import restore

    def incarnation(work) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)  # the first start says so
            with Journal.open(path, resume=restore(path), sync="none") as j:
                work(j)

    def train(j, idx: int, step: int) -> None:
        gids = j.taken([GroupRef(idx=idx)])
        j.admitted(gids, target_step=step)
        j.finished(gids, locators=[f"rows/{idx}"])
        j.trained(gids, step=step)

    for i in range(6):   # the first start and 5 restores to LSN 0: each takes a row, then dies
        incarnation(lambda j, i=i: j.taken([GroupRef(idx=i)]))

    def checkpointed(j) -> None:
        train(j, 9, 1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    incarnation(checkpointed)
    for i in range(3):   # 3 restores to step 1's checkpoint: each takes a row, then dies
        incarnation(lambda j, i=i: j.taken([GroupRef(idx=20 + i)]))
    incarnation(lambda j: train(j, 30, 2))


def test_every_restore_is_marked_even_restores_to_the_same_point(tmp_path, capsys):
    """Restores that a later restore to the same point took off the active history are still
    restores: each is a mark (in --json, one per restore with its timeline), and the table
    counts them."""
    from journal import Reader

    path = str(tmp_path / "journal")
    _crash_loop_journal(path)
    restores = sorted(t for t, tl in Reader(path).timelines.items() if tl.parent)
    assert restores == list(range(2, 11))   # every timeline but the first start's
    assert replay.cli.main(["steps", path, "--json"]) == 0
    marks = json.loads(capsys.readouterr().out)["marks"]
    marked = [(m["step"], m["timeline"]) for m in marks if m["kind"] == "restore"]
    assert sorted(t for _, t in marked) == restores
    assert sorted(s for s, _ in marked) == [0] * 6 + [1] * 3
    assert replay.cli.main(["steps", path]) == 0
    cells = _marks_column(capsys.readouterr().out)
    # step 1's row: the checkpoint, the 6 restores to LSN 0 before it and the 3 to itself
    assert cells[1] == "checkpoint, 6 restores at 0 -> timelines 2-7, 3 restores -> timelines 8-10", cells
