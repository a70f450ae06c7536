"""Restore checks the dataset's identity even with no group in flight: its length (recorded by
`taken(dataset_size=)`) and a sample of the fingerprinted rows the history took, from the
journal and from a cut alone; old records and old cuts without them still read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import warnings

import msgspec
import pytest
import torch

import journal
from journal import Journal, State
from journal.fold import fold
from journal.state import SAMPLE_FIRST_ROWS, SampledRow
from replay import RowChanged, RowChangedWarning, RowMismatch, fingerprint, restore
from tests.support.replay_support import make_dataset, ref_of
from snapshot import compact, read_cut
from snapshot.cut import DATASET_KEY, RECOVERY_FILE
from snapshot.cut import STATE_FILE

ROWS = 200


def _drained(tmp_path, ds, *, taken=ROWS, dataset_size=True, name="journal") -> str:
    """Every taken row trained, checkpoint committed: nothing in flight at the restore point."""
    path = str(tmp_path / name)
    with Journal.open(path, sync="none") as j:
        for start in range(0, taken, 8):
            gids = j.taken([ref_of(ds[i]) for i in range(start, min(start + 8, taken))],
                           loader_state={"pos": start + 8},
                           dataset_size=len(ds) if dataset_size else None)
            j.admitted(gids, target_step=start, policy_version=0)
            j.finished(gids, policy_version=0)
            j.trained(gids, step=start)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    return path


def _edited(ds, idx: int) -> list[dict]:
    out = [dict(r) for r in ds]
    out[idx]["problem"] += " (edited)"
    return out


@pytest.fixture
def ds():
    return make_dataset(ROWS)


def test_wrong_length_is_a_row_mismatch_naming_both(tmp_path, ds):
    path = _drained(tmp_path, ds)
    assert restore(path, dataset=ds).groups == []  # the right dataset restores
    with pytest.raises(RowMismatch, match="the dataset has 100 rows, the journal recorded 200"):
        restore(path, dataset=ds[:100])
    with pytest.raises(RowMismatch, match="has 2048 rows, the journal recorded 200"):
        restore(path, dataset=list(range(2048)))


def test_reshuffled_or_foreign_dataset_is_caught_without_a_recorded_length(tmp_path, ds):
    path = _drained(tmp_path, ds, dataset_size=False)  # a trainer that does not pass the length
    shuffled = list(ds)
    random.Random(5).shuffle(shuffled)
    with pytest.raises(RowMismatch, match="reordered"):
        restore(path, dataset=shuffled)
    with pytest.raises(RowChanged, match=r"dataset\[0\] changed since it was taken \(task 'math'"):
        restore(path, dataset=list(range(2048)))


def test_changed_sampled_row_follows_on_row_changed(tmp_path, ds):
    path = _drained(tmp_path, ds)
    edited = _edited(ds, 3)
    want = fingerprint(ds[3]).hex(), fingerprint(edited[3]).hex()
    with pytest.raises(RowChanged, match=f"dataset\\[3\\] changed .*task 'math'.*{want[1]} != "
                                         f"recorded {want[0]}"):
        restore(path, dataset=edited)
    with pytest.warns(RowChangedWarning, match=r"dataset\[3\] changed"):
        state = restore(path, dataset=edited, on_row_changed="warn")
    assert [r.idx for r in state.changed_sample] == [3]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = restore(path, dataset=edited, on_row_changed="accept")
    assert [(r.idx, r.task_name) for r in state.changed_sample] == [(3, "math")]


def test_sample_reaches_rows_taken_late(tmp_path, ds):
    """Beyond the first rows, the rows of power-of-two group ids are sampled (128 here)."""
    path = _drained(tmp_path, ds)
    state = restore(path)
    sampled = {r.group_id for r in state.fold_state.row_sample}
    assert sampled == set(range(SAMPLE_FIRST_ROWS)) | {32, 64, 128}
    with pytest.raises(RowChanged, match=r"group 128: dataset\[128\] changed"):
        restore(path, dataset=_edited(ds, 128))
    restore(path, dataset=_edited(ds, 100))  # a sample, not every row


def test_a_cut_carries_the_identity(tmp_path, ds):
    path = _drained(tmp_path, ds)
    cut = compact(path, retention=None).cut_path
    got = read_cut(cut).state
    want = restore(path).fold_state
    assert (got.dataset_size, got.row_sample) == (ROWS, want.row_sample) != (None, ())
    for source in (cut, path):  # the cut alone, and the journal restoring from the cut
        with pytest.raises(RowMismatch, match="has 100 rows, the journal recorded 200"):
            restore(source, dataset=ds[:100])
        with pytest.raises(RowChanged, match=r"dataset\[7\] changed"):
            restore(source, dataset=_edited(ds, 7))


def test_restore_point_sample_excludes_the_dead_tail(tmp_path, ds):
    """Rows taken after the checkpoint are not part of the restored history's sample (the
    fold's undo takes the sample back with everything else)."""
    path = _drained(tmp_path, ds, taken=16)
    with Journal.open(path, sync="none") as j:  # a crashed run's tail: no checkpoint after it
        j.taken([ref_of(ds[i]) for i in range(16, 24)], dataset_size=500)
    state = restore(path)
    assert [r.idx for r in state.fold_state.row_sample] == list(range(16))
    assert state.fold_state.dataset_size == ROWS
    restore(path, dataset=_edited(ds, 20))
    assert restore(path, at="end").fold_state.dataset_size == 500


def test_old_taken_records_without_the_size_still_decode():
    old = msgspec.msgpack.encode([1, [["taken", [[0, 5, "math", None, b"f" * 16]], None]]])
    commit = journal.events.commit_decoder.decode(old)
    assert commit.events[0].dataset_size is None
    state = fold([commit])
    assert state.dataset_size is None
    assert state.row_sample == (SampledRow(0, 5, "math", b"f" * 16),)


def test_old_cut_without_the_identity_still_reads(tmp_path, ds):
    path = _drained(tmp_path, ds)
    cut = compact(path, retention=None).cut_path
    rec = os.path.join(cut, RECOVERY_FILE)
    table = torch.load(rec, weights_only=True)
    del table[DATASET_KEY]  # what a cut of the previous release holds
    buf = io.BytesIO()
    torch.save(table, buf)
    data = buf.getvalue()
    with open(rec, "wb") as f:
        f.write(data)
    mpath = os.path.join(cut, "MANIFEST.json")
    with open(mpath) as f:
        manifest = json.load(f)
    manifest["files"][RECOVERY_FILE] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    del manifest["files"][STATE_FILE]  # nor a journal state file (a restore would read that instead)
    os.unlink(os.path.join(cut, STATE_FILE))
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    state = read_cut(cut).state
    assert (state.dataset_size, state.row_sample) == (None, ())
    assert restore(cut, dataset=ds[:100]).lsn == state.lsn  # nothing recorded, nothing to check


def test_dataset_size_argument_is_checked(tmp_path, ds):
    with Journal.open(str(tmp_path / "j"), sync="none") as j:
        with pytest.raises(ValueError, match=r"taken\(\) argument dataset_size must be an integer >= 0, got -1"):
            j.taken([ref_of(ds[0])], dataset_size=-1)
        assert j.state_copy().lsn == 0  # nothing written


def test_state_copy_and_same_as_cover_the_identity(ds):
    a = State()
    a.dataset_size, a.row_sample = 3, (SampledRow(0, 0, None, b"x"),)
    b = a.copy()
    assert b.same_as(a)
    b.dataset_size = 4
    assert not b.same_as(a)
