"""A first start and a restart run the same code: restore of a path that does not exist yet."""

import os

import pytest

from journal import GroupRef, Journal
from replay import RestoreError, restore


def test_missing_path_restores_to_the_empty_state_and_creates_nothing(tmp_path):
    path = tmp_path / "run" / "journal"
    state = restore(str(path))
    assert state.loader_state is None and state.lsn == 0 and state.step is None
    assert state.groups == [] and all(n == 0 for n in state.counts.values())
    assert not path.exists() and not path.parent.exists()
    with Journal.open(str(path), resume=state) as j:  # the README's opening snippet, first start
        gids = j.taken([GroupRef(idx=41, task_name="math")], loader_state={"pos": 1})
        assert j.owner_of(gids[0]).name == "RESERVED"


def test_missing_path_with_an_explicit_point_names_what_is_missing(tmp_path):
    path = tmp_path / "nothing"
    with pytest.raises(RestoreError, match="no step 3"):
        restore(str(path), step=3)
    with pytest.raises(RestoreError, match="LSN 7"):
        restore(str(path), at=7)


def test_a_regular_file_is_not_a_journal(tmp_path):
    f = tmp_path / "journal"
    f.write_text("hello")
    with pytest.raises(RestoreError, match="not a directory"):
        restore(str(f))
    assert os.path.getsize(f) == 5
