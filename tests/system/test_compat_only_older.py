"""Only files of an older format reach the compatibility readers (`journal.compat`,
`snapshot.compat`): a journal, its cut and the cut's row ledger written by this code open,
restore and verify with every older-format entry point refusing to run, while the v1 fixture
(tests/system/test_compat_v1.py) needs them."""

from __future__ import annotations

import shutil

import pytest

import journal.compat
import snapshot.compat
from journal import GroupRef, Journal, Reader, RolloutRef
from replay import restore, verify
from snapshot import compact, read_cut
from snapshot.row_ledger import RowLedger

from .test_compat_v1 import FIXTURE

ENTRY_POINTS = [(journal.compat, "decode_older_state_file"), (snapshot.compat, "untagged_table_version"),
                (snapshot.compat, "older_rollouts"), (snapshot.compat, "older_ledger_rollouts")]


@pytest.fixture
def refused(monkeypatch):
    """Every older-format entry point raises; the names of those called are collected."""
    called = []
    for module, name in ENTRY_POINTS:
        def refuse(*_args, _name=name, **_kwargs):
            called.append(_name)
            raise AssertionError(f"{_name} reached by a file of the current format")
        monkeypatch.setattr(module, name, refuse)
    return called


def _current_journal(path: str) -> str:
    """A journal of every kind of record a cut holds (rollouts, a prefix, spares, replay), and
    its cut at the committed checkpoint."""
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for step in range(1, 4):
            gids = j.taken([GroupRef(idx=step * 10 + i, task_name="math") for i in range(4)],
                           loader_state={"pos": step})
            j.diverted(gids[3:])
            j.admitted(gids[:1], target_step=step, rollouts=2)
            j.rollout_sealed([RolloutRef(gids[0], 0, 0, f"dp/{step}")], policy_version=step)
            j.rollout_progress(RolloutRef(gids[0], 1, 0, f"dp/{step}/p"), tokens=3, turn=1)
            j.admitted(gids[1:3], target_step=step)
            j.finished(gids[1:2], locators=[f"dp/{gids[1]}"])
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
    return compact(path, retention=None).cut_path


def test_files_of_the_current_format_never_reach_the_compat_readers(tmp_path, refused):
    path = str(tmp_path / "journal")
    cut = _current_journal(path)
    assert all(s.header.next_group_id is not None for s in Reader(path, "strict").segments)
    read = read_cut(cut)  # the tables, not the state file
    assert RowLedger.of_cut(read) is not None
    state = restore(path)
    assert state.step == 3 and restore(cut).lsn == state.lsn
    end = restore(path, at="end")
    with Journal.open(path, sync="none") as j:  # folds the tail onto the cut's state file
        assert j.state_copy().lsn == end.lsn > state.lsn
    report = verify(path)
    assert report.clean and report.checks
    assert refused == []


def test_the_v1_fixture_needs_them(tmp_path, refused):
    shutil.copytree(FIXTURE, tmp_path / "v1")
    with pytest.raises(AssertionError):
        restore(str(tmp_path / "v1" / "ckpt" / "step_3" / "ownership"))
    assert refused
