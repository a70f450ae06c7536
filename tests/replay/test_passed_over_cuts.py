"""Restore passes over a cut it cannot use: a damaged one (a check of 1-7 fails) with a
warning naming the cut and the check, so damage on disk is never only a line in
`state.skipped`; a stale one (another branch, or after the restore point) silently, because
every resume leaves those behind."""

from __future__ import annotations

import os
import re
import warnings

import pytest

import replay
from journal import GroupRef, Journal, JournalWarning
from replay import DamagedCutWarning, restore
from snapshot import compact


def _checkpointed_journal(path: str) -> tuple[str, str]:
    """A journal with two committed checkpoints and a cut of each: (older cut, newer cut)."""
    with Journal.open(path, sync="none") as j:
        for step in (1, 2):
            gids = j.taken([GroupRef(idx=step)], loader_state={"pos": step})
            j.admitted(gids, target_step=step)
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
            if step == 1:
                older = compact(path, retention=None).cut_path
    return older, compact(path, retention=None).cut_path


def _flip_byte(cut: str) -> None:
    with open(os.path.join(cut, "rollout_recovery.pt"), "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))


def _drop_manifest(cut: str) -> None:
    os.remove(os.path.join(cut, "MANIFEST.json"))


def _add_orphan(cut: str) -> None:
    with open(os.path.join(cut, "notes.txt"), "w") as f:
        f.write("not listed")


@pytest.mark.parametrize("damage, check", [(_flip_byte, "check 4 (sha256)"),
                                           (_drop_manifest, "check 1 (manifest)"),
                                           (_add_orphan, "check 3 (file not in manifest)")])
def test_a_damaged_newest_cut_warns_naming_the_cut_and_its_check(tmp_path, damage, check):
    path = str(tmp_path / "journal")
    older, newer = _checkpointed_journal(path)
    intact = restore(path)
    assert intact.base_cut == newer
    damage(newer)
    with pytest.warns(DamagedCutWarning) as record:
        state = restore(path)
    assert issubclass(DamagedCutWarning, JournalWarning)
    [w] = record
    assert newer in str(w.message) and check in str(w.message), str(w.message)
    assert w.filename == __file__  # points at the caller's restore()
    # the same state all the same, from the older cut and the tail after it
    assert state.base_cut == older and (state.lsn, state.step) == (intact.lsn, intact.step)
    assert [g.group_id for g in state.groups] == [g.group_id for g in intact.groups]
    assert [s.path for s in state.skipped] == [newer]


def test_stale_cuts_of_a_resume_do_not_warn(tmp_path):
    path = str(tmp_path / "journal")
    _older, _newer = _checkpointed_journal(path)
    with Journal.open(path, sync="none") as j:
        j.taken([GroupRef(idx=9)], loader_state={"pos": 9})
    end_cut = compact(path, at="end", retention=None).cut_path   # after the restore point
    with warnings.catch_warnings():
        warnings.simplefilter("error", JournalWarning)
        state = restore(path)
        assert end_cut in [s.path for s in state.skipped]
        with Journal.open(path, sync="none", resume=state) as j:  # a new branch: end_cut is stale
            j.taken([GroupRef(idx=10)], loader_state={"pos": 10})
        later = restore(path, at="end")
    reasons = {s.path: s.reason for s in later.skipped}
    assert re.search("JournalMismatch.*stale", reasons[end_cut])


def test_an_explicitly_named_damaged_cut_is_still_an_error(tmp_path):
    _older, newer = _checkpointed_journal(str(tmp_path / "journal"))
    _flip_byte(newer)
    with pytest.raises(replay.ChecksumMismatch, match=re.escape(newer)):
        restore(newer)
