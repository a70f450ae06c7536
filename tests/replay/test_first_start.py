"""A first start and a restart run the same code: restore of a path that does not exist yet."""

import os
import re
import warnings

import pytest

from journal import GroupRef, Journal, JournalWarning
from replay import FirstStartWarning, NothingToRestore, RestoreError, restore


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


def _no_journal_warning(fn):
    """`fn()`'s result, asserting it warned no `JournalWarning`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    assert not [w for w in caught if issubclass(w.category, JournalWarning)], [str(w.message) for w in caught]
    return result


@pytest.mark.parametrize("make", ["missing", "empty dir", "journal without commits"])
def test_a_first_start_warns_naming_the_path(tmp_path, make):
    path = tmp_path / "run" / "journal"
    if make == "empty dir":
        path.mkdir(parents=True)
    elif make == "journal without commits":
        Journal.open(str(path)).close()
    with pytest.warns(JournalWarning, match=re.escape(str(path))) as record:
        state = restore(str(path))
    assert [w.category for w in record] == [FirstStartWarning]  # a JournalWarning of its own
    assert state.first_start is True and state.lsn == 0 and state.groups == []
    assert [w.filename for w in record] == [__file__]  # points at the caller's restore()


@pytest.mark.parametrize("make", ["missing", "empty dir"])
def test_must_exist_refuses_a_first_start_naming_the_path(tmp_path, make):
    path = tmp_path / "journal"
    if make == "empty dir":
        path.mkdir()
    with pytest.raises(NothingToRestore, match=re.escape(str(path))) as exc:
        restore(str(path), must_exist=True)
    assert isinstance(exc.value, RestoreError)
    assert os.path.exists(path) == (make == "empty dir")  # nothing created


def test_an_existing_history_does_not_warn_even_before_its_first_checkpoint(tmp_path):
    path = tmp_path / "journal"
    with Journal.open(str(path)) as j:
        j.taken([GroupRef(idx=1)], loader_state={"pos": 1})
    state = _no_journal_warning(lambda: restore(str(path), must_exist=True))
    assert state.first_start is False and state.lsn == 0  # no checkpoint yet: the empty state
    with Journal.open(str(path), resume=state) as j:
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    state = _no_journal_warning(lambda: restore(str(path), must_exist=True))
    assert state.first_start is False and state.step == 1


def test_an_empty_bucket_is_a_first_start_naming_the_url(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    url = "file://" + str(bucket)
    with pytest.warns(JournalWarning, match=re.escape(url)):
        state = restore(url)
    assert state.first_start is True
    with pytest.raises(NothingToRestore, match=re.escape(url)):
        restore(url, must_exist=True)
