"""The names on disk come from `journal.layout`, and what counts as a journal directory: a
journal, an empty or missing directory; a regular file, a cut or a directory of other files
is refused by `Journal.open` and (but a cut) by `restore`, naming the path."""

from __future__ import annotations

import os

import pytest

from journal import GroupRef, Journal, JournalError, layout
from replay import RestoreError, restore
from snapshot import compact


def test_names_round_trip_through_their_parsers():
    seg = layout.segment_name(3, 4711)
    assert seg == "00000003-00000000000000004711.wal"
    assert layout.parse_segment_name(seg) == (3, 4711, False)
    assert layout.parse_segment_name(layout.archive_name(seg)) == (3, 4711, True)
    assert layout.parse_segment_name(seg + layout.UNPUBLISHED_SUFFIX) is None
    assert layout.parse_segment_name(layout.archive_name(seg) + ".tmp") is None
    assert layout.parse_torn_copy_name(layout.torn_copy_name(seg, 99, 123)) == (seg, 99, 123)
    assert layout.parse_torn_copy_name(seg) is None
    cut = layout.cut_dir_name(2, 17)
    assert layout.parse_cut_dir_name(cut) == (2, 17)
    for temp in (layout.cut_tmp_name(cut, "ab12"), layout.delete_tmp_name(cut, "ab12")):
        assert temp.startswith(layout.TMP_PREFIX) and layout.parse_cut_dir_name(temp) is None
    assert layout.parse_cut_dir_name(layout.replaced_name(cut, 5)) is None


def test_the_journal_writes_the_names_layout_gives(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, segment_bytes=4096) as j:
        for i in range(200):
            j.taken([GroupRef(idx=i)], loader_state={"i": i})
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        j.taken([GroupRef(idx=99)])
    result = compact(path, keep_cuts=1)
    names = os.listdir(path)
    assert layout.LOCK_NAME in names and layout.SNAPSHOTS_DIR in names
    assert all(layout.is_journal_entry(n) for n in names), names
    assert any(layout.parse_segment_name(n) == (1, 1, True) for n in names)  # archived by retention
    assert os.path.dirname(result.cut_path) == os.path.join(path, layout.SNAPSHOTS_DIR)
    assert layout.parse_cut_dir_name(os.path.basename(result.cut_path)) == (1, result.lsn)
    assert set(os.listdir(result.cut_path)) <= set(layout.CUT_FILES)
    assert layout.dir_kind(path)[0] is layout.DirKind.JOURNAL
    assert layout.dir_kind(result.cut_path)[0] is layout.DirKind.CUT


def test_open_of_a_regular_file_says_it_must_be_a_directory(tmp_path):
    f = tmp_path / "journal"
    f.write_text("not a journal")
    with pytest.raises(JournalError, match="must be a directory") as info:
        Journal.open(str(f))
    assert str(f) in str(info.value)
    assert f.read_text() == "not a journal"


def _foreign(tmp_path):
    d = tmp_path / "home"
    d.mkdir()
    for name in ("notes.txt", "data.csv", "model.bin", "z.log"):
        (d / name).write_text("x")
    return d


def test_open_refuses_a_directory_of_other_files_naming_a_few(tmp_path):
    d = _foreign(tmp_path)
    with pytest.raises(JournalError) as info:
        Journal.open(str(d))
    msg = str(info.value)
    assert str(d) in msg and "'data.csv'" in msg and "and 1 more" in msg
    assert "new or empty directory" in msg
    assert sorted(os.listdir(d)) == ["data.csv", "model.bin", "notes.txt", "z.log"]  # no LOCK


def test_restore_refuses_a_directory_of_other_files(tmp_path):
    d = _foreign(tmp_path)
    with pytest.raises(RestoreError, match="neither a journal nor a cut") as info:
        restore(str(d))
    assert str(d) in str(info.value) and "'data.csv'" in str(info.value)


def test_open_refuses_a_cut_and_says_to_restore_it(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        gids = j.taken([GroupRef(idx=1)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    cut = str(fast_tmp / "ckpt" / "ownership")
    compact(path, into=cut)
    before = sorted(os.listdir(cut))
    with pytest.raises(JournalError, match="cut directory") as info:
        Journal.open(cut)
    assert "restore" in str(info.value) and cut in str(info.value)
    assert sorted(os.listdir(cut)) == before
    state = restore(cut)  # the way out the message names
    with Journal.open(str(fast_tmp / "new"), resume=state) as j:
        assert j.owner_of(gids[0]).name == "RESERVED"


def test_empty_missing_and_existing_journal_directories_open(tmp_path):
    (tmp_path / "empty").mkdir()
    for p in (tmp_path / "empty", tmp_path / "missing" / "deep"):
        with Journal.open(str(p)) as j:
            j.taken([GroupRef(idx=1)])
        with Journal.open(str(p), resume=restore(str(p))):
            pass
