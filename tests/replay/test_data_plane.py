"""The data-plane contract (`snapshot.DataPlane`), one test suite for both library data planes:
`LocalDataPlane` on a directory and `ObjectStoreDataPlane` on a real S3 server on 127.0.0.1
(moto's server mode). Rows round-trip exactly (tensors of every stored dtype and awkward views,
numpy arrays, nested trees) without pickle; a put is visible to another instance (another
process, node) once it returns; delete is idempotent; `locators` lists exactly the rows;
a cut carries the rows of its REPLAY groups and sealed rollouts and `import_cut` brings them
back into a fresh store, from which restore keeps them; invalid locators are refused before
any I/O; rows under a locator never change."""

from __future__ import annotations

import itertools
import os
import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from journal import Group, GroupRef, Journal, Owner, Reader, RolloutRef
from replay import (InvalidLocator, LocalDataPlane, ObjectStoreDataPlane, RowConflict, RowsCorrupt,
                    RowsNotFound, RowsNotStorable, restore)
from snapshot import DataPlane, compact, row_locators
from snapshot.data_plane import cut_rows
from tests.support import packs
from tests.support.equality import deep_equal
from tests.support.s3_support import S3, options
from tests.support.trees import AWKWARD, values

KINDS = ["local", "object-store"]


class Store:
    """A data plane under test and how to reach its stored bytes from outside."""

    def __init__(self, kind: str, tmp_path, request):
        self.kind = kind
        if kind == "local":
            self.root = str(tmp_path / "rows")
            self.dp = self.fresh()
        else:
            self.s3 = request.getfixturevalue("s3")
            self.prefix = S3.prefix()
            self.dp = self.fresh()

    def fresh(self, where: str = "") -> DataPlane:
        """Another instance on the same store (or, with `where`, on another one)."""
        if self.kind == "local":
            return LocalDataPlane(self.root + where)
        return ObjectStoreDataPlane(S3.url(self.prefix + where), options(self.s3.endpoint))

    def raw(self, locator: str) -> bytes:
        if self.kind == "local":
            return packs.stored_bytes(self.root, locator)
        return self.s3.keys(self.prefix)[f"rows/{locator}"]

    def overwrite(self, locator: str, data: bytes) -> None:
        if self.kind == "local":
            packs.overwrite_rows(self.root, locator, data)
        else:
            self.s3.put(self.prefix, f"rows/{locator}", data)

    def put_foreign(self, name: str) -> None:
        """An object or file under the store that is no row."""
        if self.kind == "local":
            open(os.path.join(self.root, name), "wb").close()
        else:
            self.s3.put(self.prefix, name, b"not rows")


@pytest.fixture(params=KINDS)
def store(request, tmp_path):
    return Store(request.param, tmp_path, request)


_ids = itertools.count(1)


def test_both_implement_the_protocol(store):
    assert isinstance(store.dp, DataPlane)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(rows=values)
def test_any_tree_round_trips(store, rows):
    loc = store.dp.put(next(_ids), rows)
    assert deep_equal(store.dp.get(loc), rows, key_order=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool,
                                   torch.complex64])
def test_tensors_of_every_dtype_and_shape(store, dtype):
    shapes = [(), (0,), (7,), (3, 5), (2, 0, 4), (4, 1, 3), (64, 1024)]
    rows = {"t": [torch.randn(s).to(dtype) if s else torch.tensor(1).to(dtype) for s in shapes],
            "awkward": {name: make() for name, make in AWKWARD.items()},
            "numpy": (np.arange(12, dtype=">i4").reshape(3, 4).T, np.array(["ab", "c"])),
            "meta": {"step": 3, "reward": -0.5, "text": "ok", "raw": b"\x00" * 1000, None: [True]}}
    loc = store.dp.put_rollout(next(_ids), 2, 1, rows)
    got = store.fresh().get(loc)   # another instance (process, node) reads what put made durable
    assert deep_equal(got, rows, key_order=True)
    assert all(not t.is_conj() and not t.is_neg() for t in got["awkward"].values())


def test_a_row_holds_no_pickle_and_unstorable_values_are_refused(store):
    loc = store.dp.put(next(_ids), {"t": torch.arange(3)})
    data = store.raw(loc)
    assert data.startswith(b"OJROWS01") and b"torch._utils" not in data and b"PK\x03\x04" not in data
    gid = next(_ids)
    for bad in ({"s": {1, 2}}, {"o": np.array([object()])}, {"k": {(1, 2): 3}}, {"f": len}):
        with pytest.raises(RowsNotStorable, match="rows"):
            store.dp.put(gid, bad)
    assert not store.dp.has(f"g{gid}.rows")


def test_put_returns_distinct_locators_per_group_rollout_and_attempt(store):
    gid = next(_ids)
    locs = [store.dp.put(gid, {"g": 1}), store.dp.put_rollout(gid, 0, 0, {"r": 0}),
            store.dp.put_rollout(gid, 0, 1, {"r": 1}), store.dp.put_rollout(gid, 1, 0, {"r": 2})]
    assert locs == [f"g{gid}.rows", f"g{gid}-r0-a0.rows", f"g{gid}-r0-a1.rows", f"g{gid}-r1-a0.rows"]
    assert [store.dp.get(loc) for loc in locs] == [{"g": 1}, {"r": 0}, {"r": 1}, {"r": 2}]


def test_rows_under_a_locator_never_change(store):
    gid = next(_ids)
    loc = store.dp.put(gid, {"reward": torch.tensor([1.0])})
    assert store.dp.put(gid, {"reward": torch.tensor([1.0])}) == loc   # identical: done already
    with pytest.raises(RowConflict, match=f"g{gid}.rows"):
        store.fresh().put(gid, {"reward": torch.tensor([0.0])})
    assert torch.equal(store.dp.get(loc)["reward"], torch.tensor([1.0]))


def test_delete_is_idempotent_and_locators_list_exactly_the_rows(store):
    a, b, c = (store.dp.put(next(_ids), {"i": i}) for i in range(3))
    store.put_foreign("notes.txt")              # no row: never listed, never deleted
    assert {a, b, c} <= set(store.dp.locators())
    assert store.dp.delete([a, b]) == 2
    assert store.dp.delete([a, b]) == 0 and store.dp.delete([]) == 0
    assert not store.dp.has(a) and store.dp.has(c)
    assert set(store.fresh().locators()) == {c}
    with pytest.raises(RowsNotFound, match=a):
        store.dp.get(a)


BAD_LOCATORS = ["../g1.rows", "/tmp/g1.rows", "sub/g1.rows", "g1.rows/..", "..", ".", "", "g1.pt",
                "g01.rows", "g-1.rows", "g1-r0.rows", "G1.rows", "g1.rows\x00", "tq/000001", None, 7]


@pytest.mark.parametrize("bad", BAD_LOCATORS, ids=repr)
def test_invalid_locators_are_refused_before_any_io(store, bad):
    good = store.dp.put(next(_ids), {"x": 1})
    with pytest.raises(InvalidLocator):
        store.dp.get(bad)
    with pytest.raises(InvalidLocator):
        store.dp.has(bad)
    with pytest.raises(InvalidLocator):
        store.dp.delete([good, bad])
    assert store.dp.has(good)   # nothing of the list was deleted


@pytest.mark.parametrize("gid, index, attempt", [(-1, 0, 0), (True, 0, 0), ("3", 0, 0), (1.0, 0, 0),
                                                 (1, -1, 0), (1, 0, -2), (1, None, 0)])
def test_invalid_numbers_make_no_locator(store, gid, index, attempt):
    with pytest.raises(InvalidLocator):
        store.dp.put_rollout(gid, index, attempt, {})
    if index == 0 and attempt == 0:
        with pytest.raises(InvalidLocator):
            store.dp.put(gid, {})
    assert list(store.dp.locators()) == []


def test_damaged_rows_are_corrupt_not_misread(store):
    loc = store.dp.put(next(_ids), {"t": torch.arange(100)})
    data = bytearray(store.raw(loc))
    data[-5] ^= 0x40
    store.overwrite(loc, bytes(data))
    with pytest.raises(RowsCorrupt, match=f"{loc}.*sha256"):
        store.dp.get(loc)
    store.overwrite(loc, b"\x80\x02not rows")
    with pytest.raises(RowsCorrupt, match="not stored rows"):
        store.dp.get(loc)


def test_pickled_data_plane_reaches_the_same_rows(store):
    loc = store.dp.put(next(_ids), {"x": torch.ones(2)})
    twin = pickle.loads(pickle.dumps(store.dp))
    assert torch.equal(twin.get(loc)["x"], torch.ones(2))
    assert twin.put_rollout(5, 0, 0, {"y": 1}) in set(store.dp.locators())


def _journal_with_rows(path: str, dp) -> tuple[int, dict[str, object]]:
    """REPLAY: a group-level group and a group whose two rollouts are sealed; ADMITTED: a group
    with one of two rollouts sealed (a late result of its given-up attempt lies beside it) and
    the other holding a prefix, and a group-level one; a trained group's rows. The checkpoint's
    LSN and every row put."""
    rows = {}

    def put(loc_fn, *args):
        loc = loc_fn(*args, {"args": torch.tensor(args), "text": f"{args}"})
        rows[loc] = dp.get(loc)
        return loc

    j = Journal.open(path, sync="none")
    trained, plain, whole, half, bare = j.taken([GroupRef(idx=i) for i in range(5)])
    j.admitted([trained, plain, bare], target_step=1)
    j.admitted([whole, half], target_step=1, rollouts=2)
    j.finished([trained], locators=[put(dp.put, trained)])
    j.trained([trained], step=1)
    j.finished([plain], locators=[put(dp.put, plain)])
    j.rollout_sealed([RolloutRef(whole, i, 0, put(dp.put_rollout, whole, i, 0)) for i in range(2)])
    j.finished([whole])
    put(dp.put_rollout, half, 0, 0)                                 # given up: attempt 1 sealed
    j.rollout_failed([RolloutRef(half, 0, 0)], reason="deadline")
    j.rollout_sealed([RolloutRef(half, 0, 1, put(dp.put_rollout, half, 0, 1))])
    j.rollout_progress(RolloutRef(half, 1, 0, put(dp.put_progress, half, 1, 0, 1)), tokens=7)
    lsn = j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    j.close()
    return lsn, rows


def test_a_cut_carries_the_rows_restore_needs_and_import_cut_brings_them_back(store, tmp_path):
    path, cut = str(tmp_path / "journal"), str(tmp_path / "ckpt" / "ownership")
    lsn, rows = _journal_with_rows(path, store.dp)
    live = Reader(path).fold().live
    needed = sorted(loc for g in live.values() if g.owner in (Owner.REPLAY, Owner.ADMITTED)
                    for loc, _ in cut_rows(g))
    assert len(needed) == 5   # plain, whole's two rollouts, half's attempt 1 (not attempt 0), half's prefix
    compact(path, at=lsn, into=cut, data_plane=store.dp, retention=None)
    assert sorted(os.listdir(os.path.join(cut, "data_plane"))) == needed
    fresh = store.fresh("-node2")                                  # the node that resumes
    assert list(fresh.locators()) == []
    assert fresh.import_cut(cut) == len(needed)
    assert fresh.import_cut(cut) == len(needed)                    # again: the same bytes are done
    assert sorted(fresh.locators()) == needed
    assert all(deep_equal(fresh.get(loc), rows[loc]) for loc in needed)
    state = restore(cut, data_plane=fresh)
    assert state.demoted == [] and state.lost_rollouts == [] and state.lost_progress == []
    restored = {loc for g in state.replay + state.admitted
                for loc in ([g.locator] if g.rollouts is None else
                            [r.locator if r.sealed else r.progress and r.progress.locator for r in g.rollouts])
                if loc is not None}
    assert restored == set(needed)


def test_save_refuses_to_leave_a_gap_and_import_refuses_other_or_damaged_rows(store, tmp_path):
    gid = next(_ids)
    missing = Group(gid, 3, "math", 0, None, Owner.REPLAY, locator=f"g{gid}.rows")
    (tmp_path / "out").mkdir()
    with pytest.raises(RowsNotFound, match=f"group {gid}"):
        store.dp.save(str(tmp_path / "out"), [missing])
    no_rows = Group(gid, 3, "math", 0, None, Owner.REPLAY)         # finished without locators
    store.dp.save(str(tmp_path / "out"), [no_rows])
    assert os.listdir(tmp_path / "out") == []
    # a cut whose row differs from what the store holds under that locator
    loc = store.dp.put(gid, {"v": 1})
    other = store.fresh("-other")
    other.put(gid, {"v": 2})
    (tmp_path / "cut" / "data_plane").mkdir(parents=True)
    other.save(str(tmp_path / "cut" / "data_plane"), [Group(gid, 3, None, 0, None, Owner.REPLAY,
                                                            locator=loc)])
    with pytest.raises(RowConflict, match=loc):
        store.dp.import_cut(str(tmp_path / "cut"))
    assert store.dp.get(loc) == {"v": 1}
    # a damaged row file in a cut is refused, and nothing of it stored
    target = str(tmp_path / "cut" / "data_plane" / loc)
    data = bytearray(open(target, "rb").read())
    data[-1] ^= 1
    os.unlink(target)                        # (a hard link shares the source's bytes)
    open(target, "wb").write(bytes(data))
    fresh = store.fresh("-third")
    with pytest.raises(RowsCorrupt, match=loc):
        fresh.import_cut(str(tmp_path / "cut"))
    assert list(fresh.locators()) == []
    assert fresh.import_cut(str(tmp_path / "nothing")) == 0


def test_a_prefix_whose_row_was_reclaimed_is_left_out_of_a_cut(store, tmp_path):
    """A trainer may reclaim a prefix's row the state at a checkpoint still names (superseded by
    a newer one): the cut of that state leaves it out instead of failing, and a restore from the
    cut alone regenerates the rollout, reporting the prefix lost."""
    path, cut = str(tmp_path / "journal"), str(tmp_path / "ckpt" / "ownership")
    j = Journal.open(path, sync="none")
    (g,) = j.taken([GroupRef(idx=0)])
    j.admitted([g], target_step=1, rollouts=1)
    loc = store.dp.put_progress(g, 0, 0, 1, {"tokens": torch.arange(3)})
    j.rollout_progress(RolloutRef(g, 0, 0, loc), tokens=3)
    lsn = j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    j.close()
    store.dp.delete([loc])
    compact(path, at=lsn, into=cut, data_plane=store.dp, retention=None)
    assert loc not in os.listdir(os.path.join(cut, "data_plane"))
    fresh = store.fresh("-node3")
    fresh.import_cut(cut)
    state = restore(cut, data_plane=fresh)
    assert state.lost_progress == [(g, 0)] and state.admitted[0].rollouts[0].progress is None
