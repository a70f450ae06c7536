"""A journal and cuts written by format version 1 / cut schema 1 (tests/fixtures/v1, made
once by tests/fixtures/make_v1_journal.py) open, restore and verify unchanged, forever."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import sys

import pytest

from journal import GroupRef, Journal, Reader
from replay import restore

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "v1"
sys.path.insert(0, str(FIXTURE.parent))
from make_v1_journal import describe  # noqa: E402  (how expected.json was computed)

EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def _digest(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def v1(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "v1")
    return tmp_path / "v1"


@pytest.mark.parametrize("name, kwargs", [("latest", {}), ("end", {"at": "end"}),
                                          ("step_3", {"step": 3})])
def test_the_journal_restores_as_it_did(v1, name, kwargs):
    before = _digest(v1)
    assert describe(restore(str(v1 / "journal"), **kwargs)) == EXPECTED[name]
    assert _digest(v1) == before  # restore reads only


def test_the_cut_in_a_checkpoint_restores_as_it_did(v1):
    assert describe(restore(str(v1 / "ckpt" / "step_3" / "ownership"))) == EXPECTED["cut"]


def test_the_journal_reads_strictly_and_resumes(v1):
    path = str(v1 / "journal")
    assert Reader(path, "strict").problems == []
    state = restore(path)
    with Journal.open(path, resume=state) as j:
        gids = j.taken([GroupRef(idx=7)], loader_state=state.loader_state)
        j.admitted(gids, target_step=5)
    after = restore(path, at="end")
    # a new branch at the restore point: the re-marked checkpoint, the taken, the admitted
    assert state.step == 4 and after.lsn == state.lsn + 3
    assert [g.idx for g in after.admitted] == [g.idx for g in state.admitted] + [7]
    assert after.loader_state["pos"] == EXPECTED["latest"]["loader_pos"]
