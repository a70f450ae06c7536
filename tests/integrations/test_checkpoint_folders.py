"""A trainer's checkpoint folder as the journal's checkpoint (replay/integrations/checkpoint_folders.py,
which every integration uses): sealed with a manifest of every file, verified before anything is
loaded from it, and the folders of checkpoints the journal never committed set aside where the
framework does not look. (No framework needed: the module handles files only; the folders here
are named as transformers names them, `checkpoint-N`.)"""

from __future__ import annotations

import json
import os
import re

import pytest

from replay import ChecksumMismatch, ManifestMissing, MissingFile, UnsafePath
from replay.integrations.checkpoint_folders import (MANIFEST, UNCOMMITTED, seal_folder, set_aside_uncommitted,
                                                    verify_folder)

STATE = "journal-test-state.json"
FOLDERS = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folder(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"checkpoint-{step}")


def _trl_files(folder) -> None:
    os.makedirs(os.path.join(folder, "sub"))
    for name, data in {"model.safetensors": b"w" * 1000, "optimizer.pt": b"o" * 300,
                       "trainer_state.json": b"{}", "sub/extra.bin": b"x"}.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def test_a_sealed_folder_verifies_and_returns_the_state(tmp_path):
    folder = checkpoint_folder(str(tmp_path), 7)
    _trl_files(folder)
    seal_folder(folder, {"step": 7, "model_version": 8}, STATE)
    with open(os.path.join(folder, MANIFEST)) as f:
        listed = set(json.load(f)["files"])
    assert listed == {"model.safetensors", "optimizer.pt", "trainer_state.json", "sub/extra.bin", STATE}
    assert verify_folder(folder, STATE) == {"step": 7, "model_version": 8}


@pytest.mark.parametrize("damage, error, named", [
    ("flip", ChecksumMismatch, "optimizer.pt"),
    ("truncate", ChecksumMismatch, "model.safetensors"),
    ("remove", MissingFile, "sub/extra.bin"),
    ("no manifest", ManifestMissing, MANIFEST),
    ("garbage manifest", ManifestMissing, MANIFEST),
    ("escape", UnsafePath, "../outside"),
])
def test_a_damaged_folder_is_refused_naming_the_file(tmp_path, damage, error, named):
    folder = checkpoint_folder(str(tmp_path), 3)
    _trl_files(folder)
    seal_folder(folder, {"step": 3, "model_version": 4}, STATE)
    path = lambda name: os.path.join(folder, name)  # noqa: E731
    if damage == "flip":
        with open(path("optimizer.pt"), "r+b") as f:
            f.write(b"O")
    elif damage == "truncate":
        os.truncate(path("model.safetensors"), 10)
    elif damage == "remove":
        os.unlink(path("sub/extra.bin"))
    elif damage == "no manifest":
        os.unlink(path(MANIFEST))
    elif damage == "garbage manifest":
        with open(path(MANIFEST), "wb") as f:
            f.write(b"\x00not json")
    else:
        with open(path(MANIFEST)) as f:
            doc = json.load(f)
        doc["files"]["../outside"] = {"size": 0, "sha256": "0" * 64}
        with open(path(MANIFEST), "w") as f:
            json.dump(doc, f)
    with pytest.raises(error) as info:
        verify_folder(folder, STATE)
    assert named in str(info.value) and folder in str(info.value)


def test_folders_above_the_committed_step_are_set_aside(tmp_path):
    out = str(tmp_path)
    for step in (5, 10, 15, 20):
        os.makedirs(checkpoint_folder(out, step))
    os.makedirs(os.path.join(out, "runs"))
    os.makedirs(os.path.join(out, "global_step_30"))   # another framework's name: not the pattern given
    moved = set_aside_uncommitted(out, 10, FOLDERS)
    assert sorted(os.listdir(out)) == ["checkpoint-10", "checkpoint-5", "global_step_30", "runs", UNCOMMITTED]
    assert sorted(os.listdir(os.path.join(out, UNCOMMITTED))) == ["checkpoint-15", "checkpoint-20"]
    assert sorted(map(os.path.basename, moved)) == ["checkpoint-15", "checkpoint-20"]
    # the same step set aside again replaces the older copy; with nothing committed, all go
    os.makedirs(os.path.join(checkpoint_folder(out, 15), "new"))
    set_aside_uncommitted(out, None, FOLDERS)
    assert sorted(os.listdir(out)) == ["global_step_30", "runs", UNCOMMITTED]
    assert os.listdir(os.path.join(out, UNCOMMITTED, "checkpoint-15")) == ["new"]
    assert set_aside_uncommitted(str(tmp_path / "missing"), None, FOLDERS) == []
