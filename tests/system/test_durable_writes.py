"""The one durable write, `journal.vfs.FileSystem.durable_file`, and its users: `replace_file` (the
replica's marker, retention's archives), a cut's files (`snapshot/cut.py`), `replay.durable_file`
(what a trainer's `save()` writes) and a checkpoint folder's seal
(`replay/integrations/checkpoint_folders.py`). A fault injected through the seam (`FaultFS`)
reaches each: the OS error propagates as it is, and nothing half-written is left (the target as it
was, or whole; no temporary file). A cut's writes are swept op by op by test_io_error_sweep.py."""

from __future__ import annotations

import errno
import json
import os
import warnings

import pytest
import torch

from journal import JournalWarning
from replay import ManifestMissing, Session, durable_file
from replay.integrations.checkpoint_folders import MANIFEST, seal_folder, verify_folder
from tests.support.faultfs import FaultFS

OLD, NEW = b"old weights", b"new weights " * 1000
STATE = "journal-test-state.json"


def _files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                out[name] = f.read()
    return out


def _faulty(root: str, kind: str, path_contains: str | None = None) -> FaultFS:
    fs = FaultFS(root=root)
    fs.inject(kind, error=errno.EIO, path_contains=path_contains)
    return fs


# every step of a durable write, and what `path` holds once it failed there (the directory's
# fsync comes after the rename: the new file is whole in place, only its durability is in doubt)
STEPS = [("create", "old"), ("write", "old"), ("fsync", "old"), ("close", "old"), ("rename", "old"),
         ("fsync_dir", "new")]


@pytest.mark.parametrize("kind, left", STEPS)
def test_a_failing_replace_file_leaves_the_old_file_and_no_temporary(tmp_path, kind, left):
    path = tmp_path / "marker"
    path.write_bytes(OLD)
    fs = _faulty(str(tmp_path), kind)
    with pytest.raises(OSError) as info:
        fs.replace_file(str(path), NEW)
    assert info.value.errno == errno.EIO
    assert _files(str(tmp_path)) == {"marker": OLD if left == "old" else NEW}


@pytest.mark.parametrize("kind, left", STEPS)
@pytest.mark.parametrize("existed", [True, False], ids=["over an old file", "a new file"])
def test_a_failing_durable_file_leaves_the_old_file_or_none_and_no_temporary(tmp_path, kind, left, existed):
    path = tmp_path / "ckpt" / "step_3.pt"
    path.parent.mkdir()
    if existed:
        path.write_bytes(OLD)
    fs = _faulty(str(tmp_path), kind, path_contains="ckpt")
    with pytest.raises(OSError) as info:
        with durable_file(str(path), fs=fs) as f:
            f.write(NEW)
    assert info.value.errno == errno.EIO
    expected = {} if left == "old" and not existed else {"step_3.pt": OLD if left == "old" else NEW}
    assert _files(str(path.parent)) == expected


def test_a_durable_file_is_written_through_the_seam_and_survives_a_power_loss(tmp_path):
    """`torch.save` into it (a stream that seeks and tells), its missing directory made durably:
    after the block, a crash keeping only what was fsynced still holds the whole file."""
    fs = FaultFS(root=str(tmp_path))
    state = {"w": torch.arange(10_000, dtype=torch.float32), "step": 3}
    with durable_file(str(tmp_path / "run" / "ckpt" / "step_3.pt"), fs=fs) as f:
        torch.save(state, f)
    image = fs.crash_image(str(tmp_path.parent / f"{tmp_path.name}-image"))
    with open(os.path.join(image, "run", "ckpt", "step_3.pt"), "rb") as f:
        loaded = torch.load(f, weights_only=True)
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 3
    assert sum(len(op.data) for op in fs.ops_of("write")) == (tmp_path / "run" / "ckpt" / "step_3.pt").stat().st_size
    assert os.listdir(tmp_path / "run" / "ckpt") == ["step_3.pt"]


def _framework_files(folder) -> None:
    os.makedirs(os.path.join(folder, "sub"))
    for name, data in {"model.safetensors": b"w" * 1000, "optimizer.pt": b"o" * 300, "sub/extra.bin": b"x"}.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


# a step of the seal: the state file's write, a framework file's fsync, a directory's fsync, the
# manifest's write and rename; the manifest is never left, nor a temporary file
SEAL_STEPS = [("fsync", STATE), ("open", "optimizer.pt"), ("fsync", "optimizer.pt"), ("fsync_dir", "checkpoint-4/sub"),
              ("write", MANIFEST), ("rename", MANIFEST)]


@pytest.mark.parametrize("kind, on", SEAL_STEPS)
def test_a_failing_seal_leaves_no_manifest_and_a_retry_seals(tmp_path, kind, on):
    folder = str(tmp_path / "checkpoint-4")
    _framework_files(folder)
    fs = _faulty(str(tmp_path), kind, path_contains=on)
    with pytest.raises(OSError) as info:
        seal_folder(folder, {"step": 4}, STATE, fs=fs)
    assert info.value.errno == errno.EIO
    assert MANIFEST not in os.listdir(folder)
    assert not [n for n in os.listdir(folder) if ".tmp" in n]
    with pytest.raises(ManifestMissing):
        verify_folder(folder, STATE)
    seal_folder(folder, {"step": 4}, STATE, fs=fs)
    assert verify_folder(folder, STATE) == {"step": 4}


def test_a_seal_that_fails_in_save_leaves_the_checkpoint_uncommitted(tmp_path):
    """The integrations seal inside `Session.checkpoint`'s `save`: a failing seal raises out of
    `checkpoint`, which commits nothing; the same call again seals and commits."""
    folder = str(tmp_path / "trainer" / "checkpoint-1")
    _framework_files(folder)
    fs = _faulty(str(tmp_path / "trainer"), "rename", path_contains=MANIFEST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)  # the first start says so
        s = Session.open(str(tmp_path / "journal"))
    with s:
        with pytest.raises(OSError):
            s.checkpoint(1, save=lambda: seal_folder(folder, {"step": 1}, STATE, fs=fs))
        assert s.step is None
        s.checkpoint(1, save=lambda: seal_folder(folder, {"step": 1}, STATE, fs=fs))
        assert s.step == 1
    with open(os.path.join(folder, MANIFEST)) as f:
        assert set(json.load(f)["files"]) == {"model.safetensors", "optimizer.pt", "sub/extra.bin", STATE}
