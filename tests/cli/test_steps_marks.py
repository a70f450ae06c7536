"""`journal-inspect steps --png` marks checkpoints and restores. matplotlib (the `plot` extra)
may be missing, so the marks are checked in the data handed to the plotting function."""

from __future__ import annotations

import json
import sys
import types

import pytest

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
    monkeypatch.setattr(steps_command, "plot", lambda rows, marks, path, title: handed.update(
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
