"""Issue 3, test 3 and the cut's contract: what is in a cut and how it loads.

* every `.pt` loads with `torch.load(weights_only=True)` with no safe globals
  added (and torch finds no unsafe global in it), the manifest lists exactly
  the files present with their true size and sha256, and its counts match the
  tables and the journal;
* a real `StatefulDataLoader(shuffle=True)` state (it holds the sampler's
  generator state as a uint8 tensor) taken mid-epoch round-trips through
  `train_dataloader.pt` into a fresh loader that then yields the same batches;
* `into=` writes the cut into a trainer checkpoint directory (which must not
  exist: a clear `FileExistsError` otherwise), and the cut restores on its own;
* a data plane (`save`/`has`) saves the REPLAY groups' rows into `data_plane/`,
  hashed in the manifest (a changed row is a `ChecksumMismatch`);
* `keep_cuts` and `pin_steps`, and retention never leaving a restore point
  without the cut it needs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
import torch

from journal import GroupRef, Journal, Owner, Reader, position, state_file
from journal.reader import list_segments
from journal.layout import (DATALOADER_FILE, LEDGER_FILE, MANIFEST_NAME, POSITION_FILE, RECOVERY_FILE,
                            REPLAY_FILE, RESERVE_FILE, SNAPSHOTS_DIR, STATE_FILE, cut_dirs)
from snapshot import ChecksumMismatch, compact, read_cut, row_locators
from snapshot.state_at import state_at

from tests.support.equality import deep_equal
from tests.support.snapshot_support import (assert_same_state, committed_lsn, lifecycle_checkpointed,
                                            reference_states)

pytestmark = pytest.mark.filterwarnings("ignore:.*set_vital")


def _all_files(cut: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, filenames in os.walk(cut):
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, cut).replace(os.sep, "/")] = f.read()
    return out


def _strict_load(data_path: str):
    """torch.load(weights_only=True) with the user-added safe globals cleared."""
    assert torch.serialization.get_unsafe_globals_in_checkpoint(data_path) == []
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        return torch.load(data_path, weights_only=True)
    finally:
        torch.serialization.add_safe_globals(saved)


def test_files_load_weights_only_and_match_the_manifest(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        lifecycle_checkpointed(j, 3, per_step=20)
        j.taken([GroupRef(idx=999, task_name=None, epoch=None, fingerprint=b"\x01" * 16)])
        result = compact(path, "end", journal=j)
        counts = j.counts()
    cut = result.cut_path
    files = _all_files(cut)
    manifest = json.loads(files.pop(MANIFEST_NAME))
    # exactly the files the manifest lists, with their size and sha256
    assert set(files) == set(manifest["files"]) == {DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE,
                                                     RESERVE_FILE, LEDGER_FILE, STATE_FILE,
                                                     POSITION_FILE}
    for name, data in files.items():
        assert manifest["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["format"] == "ownership-journal-cut" and manifest["schema_version"] == 5
    assert manifest["lsn"] == result.lsn and manifest["next_group_id"] == 61
    assert manifest["checkpoint_step"] is None and manifest["committed_checkpoints"] == {
        "1": 7, "2": 15, "3": 23}
    # the journal's state file (not torch) decodes to the fold at the cut
    state, run_id = state_file.decode(files.pop(STATE_FILE), STATE_FILE)
    assert run_id.hex() == manifest["run_id"]
    assert_same_state(state, reference_states(path)[result.lsn], "state file at end")
    # the journal's position (not torch): the frame holding the cut's LSN, its loader's blobs
    at = position.decode(files.pop(POSITION_FILE))
    r = Reader(path)
    seg = next(s for s in r.segments if s.name == at.segment)
    assert r.position_in(seg, result.lsn) == at and at.lsn <= result.lsn and at.next_group_id == 61
    assert dict(at.blobs) == state.loader.blobs
    # every .pt loads with weights_only and no extra safe globals
    loaded = {name: _strict_load(os.path.join(cut, name)) for name in files}
    assert loaded[DATALOADER_FILE]["pos"] == 60
    tables = [loaded[RECOVERY_FILE], loaded[REPLAY_FILE], loaded[RESERVE_FILE]]
    for t in tables:
        for col in ("group_id", "idx", "epoch", "target_step", "policy_version", "replaces"):
            assert t[col].dtype == torch.int64 and t[col].shape == (t["count"],)
    phase = loaded[RECOVERY_FILE]["phase"].tolist()
    have = {Owner.RESERVED: phase.count(1), Owner.ADMITTED: phase.count(2),
            Owner.REPLAY: loaded[REPLAY_FILE]["count"], Owner.SPARE: loaded[RESERVE_FILE]["count"]}
    for owner, n in have.items():
        assert n == counts[owner] == manifest["counts"][owner.name]
    assert manifest["counts"]["TRAINED"] == counts[Owner.TRAINED] == 18
    assert manifest["counts"]["DROPPED"] == counts[Owner.DROPPED] == 3
    # and the cut reads back as the fold
    assert_same_state(read_cut(cut).state, reference_states(path)[result.lsn], "cut at end")
    # the spare file is written only when there are spares
    with Journal.open(str(fast_tmp / "k"), sync="none") as j2:
        j2.taken([GroupRef(idx=1)])
        r2 = compact(j2.path, "end", journal=j2)
    assert RESERVE_FILE not in os.listdir(r2.cut_path)


def test_stateful_dataloader_state_round_trips_through_the_cut(fast_tmp):
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = list(range(97))
    dl = StatefulDataLoader(dataset, batch_size=4, shuffle=True)
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        it = iter(dl)
        for _ in range(5):
            batch = next(it)
            j.taken([GroupRef(idx=int(i)) for i in batch], loader_state=dl.state_dict())
        expected_next = [next(it).tolist() for _ in range(6)]  # what the loader yields after
        result = compact(path, "end", journal=j)
    state = _strict_load(os.path.join(result.cut_path, DATALOADER_FILE))
    tensors = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            tensors.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(state)
    assert tensors and tensors[0].dtype == torch.uint8  # the sampler's generator state
    fresh = StatefulDataLoader(dataset, batch_size=4, shuffle=True)
    fresh.load_state_dict(state)
    got = [b.tolist() for _, b in zip(range(6), fresh)]
    assert got == expected_next
    # the cut's loader state is exactly what the trainer passed
    assert deep_equal(read_cut(result.cut_path).loader_state, state, key_order=True)


def test_cut_into_a_trainer_checkpoint_dir(fast_tmp):
    from replay import restore

    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        lifecycle_checkpointed(j, 2)
        target = str(fast_tmp / "ckpt" / "step_2" / "ownership")
        result = compact(path, journal=j, into=target)
        assert result.cut_path == target and result.step == 2
        with pytest.raises(FileExistsError, match="already exists"):
            compact(path, journal=j, into=target)
        os.makedirs(str(fast_tmp / "ckpt" / "step_3"))
        with pytest.raises(FileExistsError, match="must not exist|already exists"):
            compact(path, journal=j, into=str(fast_tmp / "ckpt" / "step_3"))
    assert os.listdir(str(fast_tmp / "ckpt" / "step_2")) == ["ownership"]
    assert not os.path.exists(os.path.join(path, SNAPSHOTS_DIR))  # into= does not write there
    refs = reference_states(path)
    assert_same_state(read_cut(target).state, refs[committed_lsn(refs[-1])], "into= cut")
    # the checkpoint restores without the journal
    moved = str(fast_tmp / "elsewhere")
    os.rename(str(fast_tmp / "ckpt"), moved)
    state = restore(os.path.join(moved, "step_2", "ownership"))
    assert state.step == 2 and state.lsn == committed_lsn(refs[-1])
    assert len(state.replay) == refs[state.lsn].counts[Owner.REPLAY]


class FileDataPlane:
    """One file of rows per REPLAY group, named by its data-plane locator, in subdirectories:
    the two methods of `snapshot.DataPlane` compaction and restore call (`save`, `has`)."""

    def __init__(self):
        self.rows: dict[str, bytes] = {}

    def save(self, directory: str, groups) -> None:
        os.makedirs(os.path.join(directory, "rows"))
        locators = sorted(loc for g in groups for loc in row_locators(g))
        for loc in locators:
            with open(os.path.join(directory, "rows", loc.replace("/", "_")), "wb") as f:
                f.write(self.rows[loc])
        with open(os.path.join(directory, "index.json"), "w") as f:
            json.dump(locators, f)

    def has(self, locator: str) -> bool:
        return locator in self.rows


def test_data_plane_files_are_saved_and_hashed(fast_tmp):
    dp = FileDataPlane()
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none") as j:
        gids = j.taken([GroupRef(idx=i) for i in range(6)])
        j.admitted(gids, target_step=1)
        locs = [f"tq/{g}" for g in gids[:4]]
        for loc in locs:
            dp.rows[loc] = loc.encode() * 100
        j.finished(gids[:4], locators=locs)
        j.trained(gids[:1], step=1)
        result = compact(path, "end", journal=j, data_plane=dp)
    manifest = json.load(open(os.path.join(result.cut_path, MANIFEST_NAME)))
    dp_files = sorted(n for n in manifest["files"] if n.startswith("data_plane/"))
    assert dp_files == ["data_plane/index.json", "data_plane/rows/tq_1", "data_plane/rows/tq_2",
                        "data_plane/rows/tq_3"]
    for name in dp_files:
        data = open(os.path.join(result.cut_path, name), "rb").read()
        assert manifest["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    cut = read_cut(result.cut_path)
    assert sorted(g.locator for g in cut.state.groups(Owner.REPLAY)) == ["tq/1", "tq/2", "tq/3"]
    # a changed row is caught by the manifest
    with open(os.path.join(result.cut_path, "data_plane", "rows", "tq_2"), "ab") as f:
        f.write(b"!")
    with pytest.raises(ChecksumMismatch, match="data_plane/rows/tq_2"):
        read_cut(result.cut_path)
    # compacting the same point again replaces the damaged cut ...
    again = compact(path, "end", data_plane=dp)
    assert again.cut_path == result.cut_path
    assert read_cut(again.cut_path).manifest.files["data_plane/rows/tq_2"].size == 400
    # ... reuses a good one, and rewrites one without the data plane when one is asked for
    created = read_cut(again.cut_path).manifest.created_unix
    assert read_cut(compact(path, "end").cut_path).manifest.created_unix == created
    shutil.rmtree(again.cut_path)
    plain = compact(path, "end")
    assert not [n for n in read_cut(plain.cut_path).manifest.files if n.startswith("data_plane/")]
    with_dp = compact(path, "end", data_plane=dp)
    assert "data_plane/index.json" in read_cut(with_dp.cut_path).manifest.files


def test_keep_cuts_and_pin_steps(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        results = []
        for step in range(1, 7):
            lifecycle_checkpointed_step(j, step)
            results.append(compact(path, journal=j, keep_cuts=2, pin_steps=[2]))
    names = {os.path.basename(p): lsn for lsn, _, p in cut_dirs(path)}
    by_step = {r.step: os.path.basename(r.cut_path) for r in results}
    # the newest two, plus the pinned step 2; steps 1, 3 and 4 were removed along the way
    assert set(names) == {by_step[6], by_step[5], by_step[2]}
    removed = [n for r in results for n in r.removed_cuts]
    assert sorted(removed) == sorted([by_step[1], by_step[3], by_step[4]])
    # segments were retired only up to the pinned cut: step 2 still restores
    refs = reference_states(path)  # archived segments read transparently
    segs = list_segments(path)
    assert any(s.archived for s in segs)
    assert all(not s.archived or s.first_lsn <= names[by_step[2]] for s in segs)
    point = state_at(path, step=2)
    assert point.base is not None and os.path.basename(point.base.path) == by_step[2]
    assert_same_state(point.state, refs[point.lsn], "restore of pinned step 2")
    # without the pin, the next compaction drops step 2's cut and retires past it
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        lifecycle_checkpointed_step(j, 7)
        r = compact(path, journal=j, keep_cuts=1)
    assert set(r.removed_cuts) == {by_step[2], by_step[5], by_step[6]}
    assert [os.path.basename(p) for _, _, p in cut_dirs(path)] == [os.path.basename(r.cut_path)]


def lifecycle_checkpointed_step(j: Journal, step: int) -> None:
    gids = j.taken([GroupRef(idx=step * 100 + i, task_name="math") for i in range(30)],
                   loader_state={"pos": step, "pad": bytes([step]) * 3000})
    j.admitted(gids[:20], target_step=step)
    j.finished(gids[:15], locators=[f"tq/{g}" for g in gids[:15]])
    j.trained(gids[:10], step=step)
    j.begin_checkpoint(step=step)
    j.commit_checkpoint(step=step)


def test_retention_keeps_the_restore_point_reachable(fast_tmp):
    """With no committed checkpoint nothing is retired (a restart resumes at LSN 0); cuts newer
    than the latest committed checkpoint, with no cut at or before it, do not let retention
    retire the history that restoring that checkpoint needs."""
    path = str(fast_tmp / "j")
    j = Journal.open(path, sync="none", segment_bytes=4096)
    try:
        for step in range(1, 4):
            lifecycle_checkpointed_step(j, step)
            j.begin_checkpoint(step=100 + step)  # begun, never committed: its writer stops
            j.close()
            j = Journal.open(path, sync="none", segment_bytes=4096)  # and the next goes on
        r = compact(path, "end", journal=j, keep_cuts=1, retention="delete")
        assert r.retired_segments == [] and len(list_segments(path)) > 2
        lifecycle_checkpointed_step(j, 4)
        L4 = j.lsn - 1
        for old in cut_dirs(path):  # no cut at or before the checkpoint
            os.rename(old[2], os.path.join(os.path.dirname(old[2]), "retired-by-test"))
        expected = Reader(path, "strict").fold(stop_lsn=L4)
        for _ in range(3):  # cuts past the checkpoint only
            j.taken([GroupRef(idx=9000 + j.lsn, task_name="x")], loader_state={"pad": os.urandom(900)})
            r = compact(path, "end", journal=j, keep_cuts=1, retention="delete")
            assert r.retired_segments == []
        assert list_segments(path)[0].first_lsn == 1
        # once a cut at the checkpoint exists, the history before it goes
        r = compact(path, "latest-checkpoint", journal=j, keep_cuts=1, retention="delete")
        assert r.lsn == L4 and r.retired_segments
    finally:
        j.close()
    point = state_at(path)
    assert point.lsn == L4 and point.base is not None and point.base.lsn == L4
    assert_same_state(point.state, expected, "restore after delete retention")
