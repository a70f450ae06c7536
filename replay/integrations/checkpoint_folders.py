"""A trainer's checkpoint folders as the journal's checkpoints, whatever the framework that writes
them: sealed durably with a manifest before the journal commits, verified before the framework
loads one, and the folders no committed checkpoint names set aside where the framework does not
look. Each integration names its folders (`folders`, the step or version as group 1) and its own
state file (`state_name`): TRL's `checkpoint-S` in trl.py, verl's `global_step_V` in verl_trainer.py.

Frameworks write a checkpoint's files with plain writes, no fsync and no rename, and pick the
highest-numbered folder to resume from whether or not it is complete. Here the folder a run
resumes from is always the journal's committed one, and a folder counts only once `seal_folder`
returned: the integration's state and a manifest (size and sha256 of every file) written durably,
every file, the folder and its parent fsynced.
"""

from __future__ import annotations

import json
import os
import re
import shutil

from journal.vfs import DEFAULT_FS, FileSystem
from snapshot.cut import file_sha256
from snapshot.manifest import safe_relpath

from .. import ChecksumMismatch, ManifestMissing, MissingFile, durable_file

MANIFEST = "journal-manifest.json"
UNCOMMITTED = "uncommitted"                # under the output directory: folders no committed checkpoint names


def seal_folder(folder: str, state: dict, state_name: str, *, fs: FileSystem = DEFAULT_FS) -> None:
    """After the framework wrote its files into `folder`: `state` (JSON, as `state_name`), then
    every file and directory fsynced, then the manifest of them all, then the parent directory,
    each through `fs`. An OS error propagates as it is, leaving no manifest (the folder does not
    count) and no temporary file."""
    with durable_file(os.path.join(folder, state_name), fs=fs) as f:
        f.write(json.dumps(state, sort_keys=True).encode())
    files = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if rel == MANIFEST:
                continue
            fs.fsync_file(path)
            size, digest = file_sha256(path)
            files[rel] = {"size": size, "sha256": digest}
        fs.fsync_dir(root)
    with durable_file(os.path.join(folder, MANIFEST), fs=fs) as f:
        f.write(json.dumps({"files": files}, indent=1, sort_keys=True).encode())
    fs.fsync_dir(os.path.dirname(os.path.abspath(folder)))


def verify_folder(folder: str, state_name: str) -> dict:
    """Every file the manifest of `folder` lists has its size and sha256 (checked before the
    framework unpickles anything in it); returns the integration's state (`state_name`)."""
    try:
        with open(os.path.join(folder, MANIFEST), "rb") as f:
            files = json.loads(f.read())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ManifestMissing(f"{folder}/{MANIFEST}: cannot be read ({type(exc).__name__}: {exc}); the "
                              "journal committed this checkpoint, so its folder was changed since: put "
                              "it back, or start a new run with a new journal") from None
    for name, entry in files.items():
        path = safe_relpath(name, folder)
        if not os.path.isfile(path):
            raise MissingFile(f"{folder}: {name}, listed by {MANIFEST}, is missing; put the committed "
                              "checkpoint's files back before resuming")
        size, digest = file_sha256(path)
        if (size, digest) != (entry["size"], entry["sha256"]):
            raise ChecksumMismatch(f"{folder}: {name} has size {size} sha256 {digest[:16]}..., {MANIFEST} "
                                   f"says size {entry['size']} sha256 {entry['sha256'][:16]}...; nothing was "
                                   "loaded from it")
    if state_name not in files:
        raise MissingFile(f"{folder}: {MANIFEST} does not list {state_name}")
    with open(os.path.join(folder, state_name), "rb") as f:
        return json.loads(f.read())


def set_aside_uncommitted(output_dir: str, committed: int | None, folders: re.Pattern) -> list[str]:
    """Move every folder of `output_dir` that `folders` matches with N (its group 1) above
    `committed` (all of them when none is committed) into `output_dir/uncommitted/` (replacing
    an older copy of the same name), where the framework's resume and checkpoint rotation never
    look; returns them."""
    if not os.path.isdir(output_dir):
        return []
    moved = []
    for name in sorted(os.listdir(output_dir)):
        match = folders.match(name)
        path = os.path.join(output_dir, name)
        if not match or not os.path.isdir(path):
            continue
        if committed is not None and int(match.group(1)) <= committed:
            continue
        aside = os.path.join(output_dir, UNCOMMITTED, name)
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        if os.path.exists(aside):
            shutil.rmtree(aside)
        os.rename(path, aside)
        moved.append(aside)
    return moved
