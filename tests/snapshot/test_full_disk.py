"""compact() and retention on a full disk: for every write of a compaction (cut files,
manifest, data plane, zstd archive), ENOSPC from then on raises `journal.JournalIOError`
naming the file and the operation, leaves no half-written temporary cut or archive, loses
nothing (restore equals the state before), and the same compaction succeeds once space is
free again."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from tests.support.faultfs import FaultFS
from journal import Journal, JournalIOError
from replay import restore
from tests.support.replay_support import make_dataset, ref_of, recovered_view
from snapshot import compact
from journal.layout import SNAPSHOTS_DIR


def _world(path: str) -> None:
    """Rotated segments, two committed checkpoints, a cut of the first: compacting writes a
    cut, deletes the old one and archives segments."""
    ds = make_dataset(120)
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for step in (1, 2):
            for i in range(60 * (step - 1), 60 * step, 6):
                gids = j.taken([ref_of(ds[k]) for k in range(i, i + 6)], loader_state={"pos": i})
                j.admitted(gids, target_step=step)
                if i % 12:
                    j.finished(gids, locators=[f"dp/{g}" for g in gids])
                    j.trained(gids, step=step)
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
            if step == 1:
                compact(path, retention=None)


def _leftovers(path: str) -> list[str]:
    names = [n for n in os.listdir(path) if n.endswith(".tmp")]
    names += [n for n in os.listdir(os.path.join(path, SNAPSHOTS_DIR)) if n.startswith(".tmp-")]
    return names


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_full_disk_at_every_write_of_compaction(mode, tmp_path):
    pristine = str(tmp_path / "pristine")
    _world(pristine)
    want = recovered_view(restore(pristine))
    probe = str(tmp_path / "probe")
    shutil.copytree(pristine, probe)
    fs = FaultFS(root=probe)
    compact(probe, keep_cuts=1, retention=mode, fs=fs)
    writes = fs.count("write")
    assert writes > 3 and (mode == "delete" or fs.count("write", path_contains=".zst"))
    operations = set()
    for n in range(1, writes + 1):
        world = str(tmp_path / f"w{n}")
        shutil.copytree(pristine, world)
        fs = FaultFS(root=world)
        fs.inject("write", nth=n, error=errno.ENOSPC, persistent=True)
        with pytest.raises(JournalIOError) as info:
            compact(world, keep_cuts=1, retention=mode, fs=fs)
        err = info.value
        assert err.errno == errno.ENOSPC and err.operation in str(err)
        assert err.path.startswith(world) and err.path in str(err)
        operations.add(err.operation)
        assert _leftovers(world) == [], f"write {n}: {_leftovers(world)}"
        assert recovered_view(restore(world)) == want, f"write {n}: the restore changed"
        fs.clear_faults()
        compact(world, keep_cuts=1, retention=mode, fs=fs)
        assert recovered_view(restore(world)) == want
        shutil.rmtree(world)
    assert "write the cut" in operations
    assert mode == "delete" or "write the archive" in operations
