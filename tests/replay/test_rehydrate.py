"""Test 3 and fingerprints: rehydration catches reordered, shrunk and edited datasets; an
edited row is caught only with fingerprints; fingerprints are stable across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import replay
from journal import Journal
from replay import RowChanged, RowChangedWarning, RowMismatch, RowMissing, fingerprint, restore
from tests.support.replay_support import collate, make_dataset, ref_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _journal(tmp_path, ds, *, with_fingerprint=True) -> str:
    """Six groups of ds[2..7] in RESERVED/ADMITTED/REPLAY, checkpoint committed."""
    path = str(tmp_path / "journal")
    with Journal.open(path, sync="none") as j:
        gids = j.taken([ref_of(ds[i], with_fingerprint=with_fingerprint) for i in range(2, 8)],
                       loader_state={"pos": 8})
        j.admitted(gids[2:], target_step=1, policy_version=0)
        j.finished(gids[4:], policy_version=0, locators=["a", "b"])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    return path


def test_rehydrates_every_group(tmp_path):
    ds = make_dataset(10)
    state = restore(_journal(tmp_path, ds), dataset=ds, collate_fn=collate)
    assert len(state.groups) == 6
    for g in state.groups:
        assert g.prompt == collate([ds[g.idx]])
        assert g.fingerprint == fingerprint(ds[g.idx])
    assert state.changed_rows == []


def test_reordered_dataset_is_caught(tmp_path):
    ds = make_dataset(10)
    path = _journal(tmp_path, ds)
    with pytest.raises(RowMismatch, match="reordered"):
        restore(path, dataset=ds[::-1], collate_fn=collate)
    # rows that do not carry their own idx: the fingerprint still tells them apart
    bare = [{k: v for k, v in r.items() if k != "idx"} for r in ds]
    path2 = str(tmp_path / "bare")
    with Journal.open(path2, sync="none") as j:
        j.taken([replay_ref(bare, i) for i in (3, 4)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    assert [g.prompt for g in restore(path2, dataset=bare).groups] == [bare[3], bare[4]]
    with pytest.raises(RowChanged):
        restore(path2, dataset=bare[::-1])


def replay_ref(rows, i):
    from journal import GroupRef
    return GroupRef(idx=i, task_name=rows[i]["task_name"], fingerprint=fingerprint(rows[i]))


def test_shrunk_dataset_is_caught(tmp_path):
    ds = make_dataset(10)
    path = _journal(tmp_path, ds)
    with pytest.raises(RowMissing, match=r"dataset\[\d+\] does not exist"):
        restore(path, dataset=ds[:5], collate_fn=collate)


def test_other_task_is_caught(tmp_path):
    ds = make_dataset(10)
    path = _journal(tmp_path, ds)
    other = [dict(r, task_name="code") for r in ds]
    with pytest.raises(RowMismatch, match="task_name 'code'"):
        restore(path, dataset=other, collate_fn=collate)


def _edited(ds, idx):
    out = [dict(r) for r in ds]
    out[idx]["problem"] = "What is 2 + 2? (edited under the same idx)"
    return out


def test_edited_row_with_fingerprints(tmp_path):
    ds = make_dataset(10)
    path = _journal(tmp_path, ds)
    edited = _edited(ds, 5)
    victim = next(g.group_id for g in restore(path).groups if g.idx == 5)
    with pytest.raises(RowChanged, match=f"group {victim}: dataset\\[5\\] changed"):
        restore(path, dataset=edited, collate_fn=collate)  # default on_row_changed="error"
    with pytest.warns(RowChangedWarning, match=f"group {victim}"):
        warned = restore(path, dataset=edited, collate_fn=collate, on_row_changed="warn")
    assert [g.group_id for g in warned.changed_rows] == [victim]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accepted = restore(path, dataset=edited, collate_fn=collate, on_row_changed="accept")
    assert [g.group_id for g in accepted.changed_rows] == [victim]
    g = next(g for g in accepted.groups if g.group_id == victim)
    assert g.prompt == collate([edited[5]])   # accepted: the new content is what it trains on
    with pytest.raises(ValueError, match="on_row_changed"):
        restore(path, dataset=edited, on_row_changed="ignore")


def test_edited_row_without_fingerprints_is_accepted(tmp_path):
    """NeMo-RL's documented blind spot: without a fingerprint an edit under the same idx
    cannot be seen; restore accepts it (nothing to compare) and reports nothing."""
    ds = make_dataset(10)
    path = _journal(tmp_path, ds, with_fingerprint=False)
    edited = _edited(ds, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = restore(path, dataset=edited, collate_fn=collate)
    assert state.changed_rows == []
    g = next(g for g in state.groups if g.idx == 5)
    assert g.fingerprint is None and g.prompt == collate([edited[5]])


def test_row_with_tensor_idx(tmp_path):
    ds = [{"idx": torch.tensor(i), "task_name": "math", "ids": torch.arange(i + 1)} for i in range(6)]
    path = str(tmp_path / "journal")
    with Journal.open(path, sync="none") as j:
        j.taken([replay_ref(ds, 4)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    (g,) = restore(path, dataset=ds).groups
    assert g.prompt is ds[4]


# -- fingerprints --------------------------------------------------------------------------------

def _row():
    return {"idx": 41, "task_name": "math", "prompt": "Solve x^2 = 4 ✓", "weight": 0.1,
            "flags": [True, False, None], "pair": (1, -2 ** 70), "raw": b"\x00\xff",
            "input_ids": torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int64),
            "mask": torch.tensor([True, False]), "half": torch.tensor([0.5, -1.25], dtype=torch.bfloat16),
            "nested": {"b": {"z": 1, "a": [1.5, float("inf")]}, "a": ""}}


# pinned: a change of the canonical encoding would silently make every recorded fingerprint
# differ (RowChanged on restore); if this fails on purpose, the format needs a version bump
GOLDEN = "83b9526fc2249faa420c7bcc0d859c46"


def test_fingerprint_is_canonical():
    row = _row()
    fp = fingerprint(row)
    assert isinstance(fp, bytes) and len(fp) == 16
    assert fp.hex() == GOLDEN
    reordered = dict(reversed(list(row.items())))
    reordered["nested"] = {"a": "", "b": {"a": [1.5, float("inf")], "z": 1}}
    assert fingerprint(reordered) == fp                              # key order does not matter
    assert fingerprint(dict(row, pair=[1, -2 ** 70])) == fp          # tuple and list alike
    wide = torch.tensor([[1, 2, 3, 0], [4, 5, 6, 0]])[:, :3]         # a non-contiguous view
    assert fingerprint(dict(row, input_ids=wide)) == fp
    for change in ({"idx": 42}, {"weight": 0.1000001}, {"prompt": "Solve x^2 = 4"},
                   {"input_ids": row["input_ids"].to(torch.int32)},
                   {"input_ids": row["input_ids"].reshape(3, 2)}, {"flags": [True, False]},
                   {"idx": 41.0}, {"raw": b"\x00\xfe"}, {"extra": None}):
        assert fingerprint(dict(row, **change)) != fp, change
    with pytest.raises(TypeError, match="cannot fingerprint"):
        fingerprint({"x": object()})
    as_numpy = dict(row, idx=np.int64(41), input_ids=row["input_ids"].numpy(), weight=np.float64(0.1))
    assert fingerprint(as_numpy) == fp                               # numpy values as their torch/Python twins


def test_fingerprint_identical_across_processes():
    code = ("import sys, torch; sys.path.insert(0, %r)\n"
            "from tests.replay.test_rehydrate import _row\n"
            "from replay import fingerprint\n"
            "print(fingerprint(_row()).hex())\n") % ROOT
    here = fingerprint(_row()).hex()
    # another interpreter with another str-hash seed (dict/set order of str keys differs)
    seed = "4242" if os.environ.get("PYTHONHASHSEED") != "4242" else "7"
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == here == GOLDEN
    assert replay.fingerprint is fingerprint
