"""Issue 3, test 2: a crash at every step of the cut protocol and of retention.

A journal with several segments, six committed checkpoints and one older cut
is compacted (`keep_cuts=1`, so the old cut is deleted and the segments it
covered are archived or deleted). The compaction is first run once through
`FaultFS` to record its operations; then, for every N, a fresh copy of the
journal is compacted with operation N failing and every later one too (the
process dies there). Each crash leaves two worlds, both checked:

* the directory as the dying process left it (every op before N happened);
* a power-loss image (`FaultFS.crash_image`: only what was fsynced survives).

In each: a strict `Reader` reads the history (archive mode: the whole history
from archived + live segments, equal to the fold before the compaction); every
cut that existed before and is still listed passes `read_cut`; no `.tmp-*`
directory is listed by `cut_dirs`/`usable_cuts` or used as `state_at`'s base;
the state at the latest checkpoint equals the fold; compacting again succeeds,
leaves no `.tmp-*` directory and no `*.wal.zst.tmp`, and writes a cut equal to
the fold; finally the journal opens for writing (`Journal.open`, with
`resume=` once the head was deleted) at the expected LSN.

`compact(into=...)` (a cut written into a trainer checkpoint directory) gets
the same sweep without retention.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil

import pytest

from tests.support.faultfs import FaultFS, snapshot_tree
from journal import Journal, JournalIOError, Reader
from journal.reader import list_segments
from snapshot import compact, read_cut
from snapshot.state_at import state_at
from journal.layout import SNAPSHOTS_DIR, cut_dirs
from snapshot.catalog import anchor_problem, usable_cuts

from tests.support.snapshot_support import assert_same_state, committed_lsn, reference_states

# the operation kinds a compaction with retention must have gone through for the sweep to
# mean anything (every step the issue names: write, fsync, rename, directory fsync, archive
# write, delete of a segment and of a cut)
REQUIRED = {"archive": {"mkdir", "create", "write", "fsync", "rename", "fsync_dir", "unlink", "rmtree"},
            "delete": {"mkdir", "create", "write", "fsync", "rename", "fsync_dir", "unlink", "rmtree"}}


def _build(path: str) -> None:
    from journal import GroupRef
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        _steps(j, range(1, 4), 0)
        compact(path, journal=j, retention=None)  # the older cut, at step 3
        _steps(j, range(4, 7), 1000)
        j.taken([GroupRef(idx=5000)], loader_state={"pos": -1})  # a tail after the last checkpoint


def _steps(j: Journal, steps, first_idx: int) -> None:
    from journal import GroupRef
    idx = first_idx
    for step in steps:
        gids = j.taken([GroupRef(idx=idx + i, task_name="math") for i in range(24)],
                       loader_state={"pos": idx + 24, "rng": bytes([step]) * 900})
        idx += 24
        j.admitted(gids[:12], target_step=step, policy_version=step)
        j.finished(gids[:10], policy_version=step, locators=[f"tq/{g}" for g in gids[:10]])
        j.trained(gids[:8], step=step)
        j.diverted(gids[-2:])
        with j.transaction() as tx:
            tx.discarded([gids[11]], reason="rollout_failed")
            tx.admitted([gids[-1]], target_step=step, replaces=gids[11])
        j.begin_checkpoint(step=step)
        j.commit_checkpoint(step=step)


@pytest.fixture(scope="module")
def pristine(fast_tmp_module):
    path = str(fast_tmp_module / "pristine")
    _build(path)
    refs = reference_states(path)
    cuts_before = [os.path.basename(p) for _, _, p in cut_dirs(path)]
    assert len(cuts_before) == 1 and len(list_segments(path)) >= 3
    return path, refs, cuts_before


def _check_world(world: str, mode: str, refs, cuts_before: list[str], label: str) -> None:
    end = refs[-1]
    L = committed_lsn(end)
    reader = Reader(world, "strict")
    segs = list_segments(world)
    if mode == "archive" or segs[0].first_lsn == 1:
        assert_same_state(reader.fold(), end, f"{label}: strict fold of the whole history")
    # previous cuts: still valid wherever they are still listed
    snapshots = os.path.join(world, SNAPSHOTS_DIR)
    for name in cuts_before:
        p = os.path.join(snapshots, name)
        if os.path.exists(p):
            cut = read_cut(p)
            assert anchor_problem(reader, cut) is None, f"{label}: {name} lost its anchor"
    # nothing temporary is ever taken for a cut, and a cut is listed only once it is whole
    listed = [p for _, _, p in cut_dirs(world)]
    assert not [p for p in listed if os.path.basename(p).startswith(".tmp-")], label
    for p in listed:
        cut = read_cut(p)  # raises the failing check: a listed cut is complete and verified
        assert anchor_problem(reader, cut) is None, f"{label}: {p} is not on the history"
    skipped = []
    usable = list(usable_cuts(reader, world, skipped))
    assert not [c for c in usable if os.path.basename(c.path).startswith(".tmp-")], label
    point = state_at(world, "latest-checkpoint")
    assert point.base is None or not os.path.basename(point.base.path).startswith(".tmp-"), label
    assert_same_state(point.state, refs[L], f"{label}: state at the latest checkpoint")
    # compacting again succeeds and cleans every leftover
    result = compact(world, keep_cuts=1, retention=mode)
    assert not [n for n in os.listdir(snapshots) if n.startswith(".tmp-")], f"{label}: {os.listdir(snapshots)}"
    assert not [n for n in os.listdir(world) if n.endswith(".tmp")], f"{label}: {os.listdir(world)}"
    assert_same_state(read_cut(result.cut_path).state, refs[L], f"{label}: the cut after recovery")
    assert_same_state(state_at(world, "end").state, end, f"{label}: state at the end")
    # and the journal opens for writing
    if list_segments(world)[0].first_lsn == 1:
        with Journal.open(world) as j:
            assert j.lsn == end.lsn
    else:  # the head was deleted: a restart resumes from the cut (a new branch at L)
        with Journal.open(world, resume=state_at(world).state) as j:
            assert j.lsn == L
    state_at(world, "end")  # the reopened history reads back


def _sweep(tmp: str, pristine_path: str, run, check) -> tuple[int, set[str]]:
    """Record the operation's ops once, then crash at each of them in turn."""
    probe = os.path.join(tmp, "probe")
    shutil.copytree(pristine_path, probe)
    fs = FaultFS(root=probe)
    run(probe, fs)
    total = len(fs.ops)
    kinds = {op.kind for op in fs.ops}
    seen: set[tuple] = set()
    for n in range(1, total + 1):
        if fs.ops[n - 1].kind == "close":
            continue  # closing a descriptor changes nothing on disk
        live = os.path.join(tmp, f"live-{n}")
        shutil.copytree(pristine_path, live)
        ffs = FaultFS(root=live)
        ffs.inject(None, nth=n, persistent=True)
        with pytest.raises(JournalIOError):
            run(live, ffs)
        image = ffs.crash_image(os.path.join(tmp, f"image-{n}"))
        op = ffs.ops[n - 1]
        assert op.failed and op.kind == fs.ops[n - 1].kind
        for world, how in ((live, "process died"), (image, "power loss")):
            key = _fingerprint(world)
            if key not in seen:  # many crash points leave the very same files
                seen.add(key)
                check(world, f"op {n}/{total} {op.kind} {os.path.basename(op.path)} ({how})")
            shutil.rmtree(world)
    return total, kinds


def _fingerprint(world: str) -> tuple:
    """The files of a world, with the random suffix of temporary names blanked out."""
    out = []
    for rel, data in snapshot_tree(world).items():
        rel = re.sub(r"-[0-9a-f]{8}(?=$|/)", "-*", rel)
        out.append((rel, None if data is None else hashlib.sha256(data).digest()))
    return tuple(sorted(out))


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_crash_at_every_step_of_compaction(mode, pristine, fast_tmp):
    path, refs, cuts_before = pristine

    def run(world: str, fs: FaultFS) -> None:
        compact(world, keep_cuts=1, retention=mode, fs=fs)

    def check(world: str, label: str) -> None:
        _check_world(world, mode, refs, cuts_before, label)

    total, kinds = _sweep(str(fast_tmp), path, run, check)
    assert REQUIRED[mode] <= kinds, f"the compaction never did {REQUIRED[mode] - kinds}"
    assert total >= 30


def test_crash_at_every_step_of_a_cut_into_a_checkpoint_dir(pristine, fast_tmp):
    path, refs, cuts_before = pristine
    L = committed_lsn(refs[-1])

    def run(world: str, fs: FaultFS) -> None:
        compact(world, into=os.path.join(world, "ckpt", "step_6", "ownership"), retention=None, fs=fs)

    def check(world: str, label: str) -> None:
        target = os.path.join(world, "ckpt", "step_6", "ownership")
        parent = os.path.dirname(target)
        if os.path.exists(target):  # the rename survived: it must be the whole cut
            assert_same_state(read_cut(target).state, refs[L], label)
            return
        # retrying cleans the temporary sibling and writes the cut
        compact(world, into=target, retention=None)
        assert os.listdir(parent) == ["ownership"], f"{label}: {os.listdir(parent)}"
        assert_same_state(read_cut(target).state, refs[L], label)
        with Journal.open(world) as j:
            assert j.lsn == refs[-1].lsn

    total, kinds = _sweep(str(fast_tmp), path, run, check)
    assert {"mkdir", "create", "write", "fsync", "rename", "fsync_dir"} <= kinds


def test_a_cut_deleted_halfway_is_never_listed(pristine, fast_tmp):
    """rmtree is not atomic: a crash in the middle of deleting a cut leaves some of its files.
    Retention renames a cut to a .tmp- name before removing it, so what is left is never
    listed as a cut, and the next compaction removes it."""
    path, refs, cuts_before = pristine
    world = str(fast_tmp / "w")
    shutil.copytree(path, world)
    fs = FaultFS(root=world)

    def half_done(kind: str, victim: str) -> None:
        names = sorted(os.listdir(victim))
        for name in names[: len(names) // 2 + 1]:  # MANIFEST.json is among the first to go
            os.unlink(os.path.join(victim, name))

    fs.on("rmtree", half_done)
    fs.inject("rmtree", nth=1)
    with pytest.raises(JournalIOError):
        compact(world, keep_cuts=1, retention="archive", fs=fs)
    leftovers = [n for n in os.listdir(os.path.join(world, SNAPSHOTS_DIR)) if n.startswith(".tmp-del-")]
    assert len(leftovers) == 1
    for _, _, p in cut_dirs(world):
        read_cut(p)
    compact(world, keep_cuts=1, retention="archive")
    assert not [n for n in os.listdir(os.path.join(world, SNAPSHOTS_DIR)) if n.startswith(".tmp-")]
