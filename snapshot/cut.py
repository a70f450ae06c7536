"""Writing and reading one cut directory.

Write protocol (crash-safe at every step): make `.tmp-<name>-<random>` beside
the final directory; write each file and fsync it; let the data plane save
into `data_plane/` and fsync what it wrote; write MANIFEST.json last and fsync
it; fsync the temporary directory; rename it to its final name; fsync the
parent. A directory whose name starts with `.tmp-` is never read as a cut.

Read protocol: the chain of checks of DESIGN 6.1, in order; nothing is
unpickled before its sha256 matched, and then only with `weights_only=True`.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, runtime_checkable

import torch

from journal import DEFAULT_FS, Group, LoaderState, Owner, OsFileSystem, State

from . import manifest as mf
from .errors import ChecksumMismatch, CountMismatch, CorruptRecord, MissingFile, ManifestMissing, SchemaMismatch, \
    OrphanFile, TwoOwners
from .tables import decode_table, encode_table

TMP_PREFIX = ".tmp-"
DATALOADER_FILE = "train_dataloader.pt"
RECOVERY_FILE = "rollout_recovery.pt"
REPLAY_FILE = "replay_buffer_metadata.pt"
RESERVE_FILE = "replacement_reserve.pt"
DATA_PLANE_DIR = "data_plane"


@runtime_checkable
class DataPlane(Protocol):
    """The trainer's store of finished rollouts (rows), keyed by a group's data-plane locator."""

    def save(self, directory: str, replay_groups: list[Group]) -> None:
        """Save the rows of `replay_groups` under `directory` (it exists and is empty)."""

    def has(self, locator: str) -> bool:
        """Whether the rows behind `locator` are still available."""


@dataclass
class Cut:
    """A cut that passed the checks: its manifest, its state, and where it lives."""

    path: str
    manifest: mf.Manifest
    state: State

    @property
    def lsn(self) -> int:
        return self.manifest.lsn

    @property
    def timeline(self) -> int:
        return self.manifest.timeline

    @property
    def loader_state(self) -> Any:
        return self.state.loader.decode() if self.state.loader is not None else None


def _save_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _fsync_tree(fs: OsFileSystem, root: str) -> None:
    """fsync every file and directory the data plane wrote (it may not have)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fs.fsync_dir(dirpath)


def _sha256_file(path: str) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def write_cut(final_dir: str, state: State, *, run_id: bytes, timeline: int,
              data_plane: DataPlane | None = None, fs: OsFileSystem | None = None) -> str:
    """Write `state` as a cut at `final_dir` (which must not exist) atomically; returns it."""
    fs = fs or DEFAULT_FS
    final_dir = os.path.abspath(final_dir)
    if os.path.exists(final_dir):
        raise FileExistsError(f"cut directory {final_dir} already exists")
    parent = os.path.dirname(final_dir)
    fs.makedirs(parent)
    tmp = os.path.join(parent, f"{TMP_PREFIX}{os.path.basename(final_dir)}-{secrets.token_hex(4)}")
    fs.mkdir(tmp)
    fs.fsync_dir(parent)
    by_owner: dict[Owner, list[Group]] = {o: [] for o in (Owner.RESERVED, Owner.ADMITTED,
                                                           Owner.REPLAY, Owner.SPARE)}
    for g in state.groups():
        by_owner[g.owner].append(g)
    files: dict[str, mf.FileEntry] = {}

    def put(name: str, data: bytes) -> None:
        f = fs.create(os.path.join(tmp, name))
        try:
            f.write(data)
            f.sync()
        finally:
            f.close()
        files[name] = mf.FileEntry(len(data), hashlib.sha256(data).hexdigest())

    loader = state.loader.decode() if state.loader is not None else None
    put(DATALOADER_FILE, _save_bytes(loader))
    put(RECOVERY_FILE, _save_bytes(encode_table(by_owner[Owner.RESERVED] + by_owner[Owner.ADMITTED])))
    put(REPLAY_FILE, _save_bytes(encode_table(by_owner[Owner.REPLAY])))
    if by_owner[Owner.SPARE]:
        put(RESERVE_FILE, _save_bytes(encode_table(by_owner[Owner.SPARE])))
    if data_plane is not None:
        dp = os.path.join(tmp, DATA_PLANE_DIR)
        fs.mkdir(dp)
        data_plane.save(dp, by_owner[Owner.REPLAY])
        _fsync_tree(fs, dp)
        for dirpath, _, filenames in os.walk(dp):
            for name in filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, tmp).replace(os.sep, "/")
                size, digest = _sha256_file(full)
                files[rel] = mf.FileEntry(size, digest)
    step = next((s for s, lsn in {**state.pending_checkpoints, **state.committed_checkpoints}.items()
                 if lsn == state.lsn), None)
    manifest = mf.Manifest(
        format=mf.FORMAT_NAME, schema_version=mf.SCHEMA_VERSION, run_id=run_id.hex(),
        timeline=timeline, lsn=state.lsn, chain=state.chain, checkpoint_step=step,
        counts={o.name: state.counts[o] for o in Owner}, next_group_id=state.next_group_id,
        pending_checkpoints={str(k): v for k, v in state.pending_checkpoints.items()},
        committed_checkpoints={str(k): v for k, v in state.committed_checkpoints.items()},
        has_loader_state=loader is not None, files=files, created_unix=time.time())
    f = fs.create(os.path.join(tmp, mf.MANIFEST_NAME))
    try:
        f.write(mf.encode(manifest))
        f.sync()
    finally:
        f.close()
    fs.fsync_dir(tmp)
    fs.rename(tmp, final_dir)
    fs.fsync_dir(parent)
    return final_dir


def _load_pt(path: str, data: bytes) -> Any:
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # any unpickling failure of a file whose hash matched
        raise CorruptRecord(f"{path}: does not load with weights_only=True: {exc}") from None


def read_cut(cut_dir: str) -> Cut:
    """Load a cut, running checks 1-7 of DESIGN 6.1 in order; raises the first that fails."""
    cut_dir = os.path.abspath(cut_dir)
    mpath = os.path.join(cut_dir, mf.MANIFEST_NAME)
    try:
        with open(mpath, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ManifestMissing(f"{cut_dir}: no {mf.MANIFEST_NAME} (an incomplete or foreign cut)") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise ManifestMissing(f"{mpath}: cannot be read: {exc}") from None
    manifest = mf.decode(raw, cut_dir)
    paths = {name: mf.safe_relpath(name, cut_dir) for name in manifest.files}
    for name, path in paths.items():                                        # 2
        if not os.path.isfile(path):
            raise MissingFile(f"{cut_dir}: {name} is listed in the manifest but missing")
    for dirpath, dirnames, filenames in os.walk(cut_dir):                   # 3
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = os.path.relpath(os.path.join(dirpath, name), cut_dir).replace(os.sep, "/")
            if rel != mf.MANIFEST_NAME and rel not in manifest.files:
                raise OrphanFile(f"{cut_dir}: {rel} is in the cut but not in its manifest")
    contents: dict[str, bytes] = {}
    for name, path in paths.items():                                        # 4
        entry = manifest.files[name]
        if name.startswith(DATA_PLANE_DIR + "/"):
            size, digest = _sha256_file(path)
        else:
            try:
                with open(path, "rb") as f:
                    data = f.read(entry.size + 1)
            except PermissionError as exc:
                raise MissingFile(f"{cut_dir}: {name} cannot be read: {exc}") from None
            size, digest = len(data), hashlib.sha256(data).hexdigest()
            contents[name] = data
        if size != entry.size or digest != entry.sha256:
            raise ChecksumMismatch(f"{cut_dir}: {name} has size {size} sha256 {digest[:16]}..., the "
                                   f"manifest says size {entry.size} sha256 {entry.sha256[:16]}...")
    if manifest.schema_version != mf.SCHEMA_VERSION:                        # 5
        raise SchemaMismatch(f"{cut_dir}: schema version {manifest.schema_version}, this code "
                                f"reads {mf.SCHEMA_VERSION}")
    for required in (DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE):
        if required not in contents:
            raise MissingFile(f"{cut_dir}: the manifest does not list {required}")
    live_owners = {Owner.RESERVED: RECOVERY_FILE, Owner.ADMITTED: RECOVERY_FILE,
                   Owner.REPLAY: REPLAY_FILE, Owner.SPARE: RESERVE_FILE}
    groups: list[Group] = []
    loaded = {}
    for name, allowed in ((RECOVERY_FILE, frozenset({Owner.RESERVED, Owner.ADMITTED})),
                          (REPLAY_FILE, frozenset({Owner.REPLAY})),
                          (RESERVE_FILE, frozenset({Owner.SPARE}))):
        if name not in contents:
            loaded[name] = []
            continue
        where = os.path.join(cut_dir, name)
        loaded[name] = decode_table(_load_pt(where, contents[name]), where, allowed)
    for owner, name in live_owners.items():                                 # 6
        have = sum(1 for g in loaded[name] if g.owner == owner)
        want = manifest.counts.get(owner.name)
        if have != want:
            raise CountMismatch(f"{cut_dir}: {name} holds {have} {owner.name} groups, the manifest "
                                f"says {want}")
    state = State()
    seen: dict[int, str] = {}
    for name in (RECOVERY_FILE, REPLAY_FILE, RESERVE_FILE):                 # 7
        for g in loaded[name]:
            if g.group_id in seen:
                raise TwoOwners(f"{cut_dir}: group {g.group_id} is in both {seen[g.group_id]} and {name}")
            if g.group_id >= manifest.next_group_id:
                raise CorruptRecord(f"{cut_dir}: group {g.group_id} in {name} is not below the "
                                    f"manifest's next group id {manifest.next_group_id}")
            seen[g.group_id] = name
            state.live[g.group_id] = g
    loader = _load_pt(os.path.join(cut_dir, DATALOADER_FILE), contents[DATALOADER_FILE])
    if (loader is not None) != manifest.has_loader_state:
        raise CorruptRecord(f"{cut_dir}: {DATALOADER_FILE} disagrees with the manifest about "
                            "holding a loader state")
    try:
        state.loader = LoaderState.from_object(loader) if loader is not None else None
    except ValueError as exc:
        raise CorruptRecord(f"{cut_dir}: {DATALOADER_FILE}: {exc}") from None
    try:
        for o in Owner:
            state.counts[o] = int(manifest.counts.get(o.name, 0))
        state.pending_checkpoints = {int(k): v for k, v in manifest.pending_checkpoints.items()}
        state.committed_checkpoints = {int(k): v for k, v in manifest.committed_checkpoints.items()}
    except ValueError:
        raise CorruptRecord(f"{cut_dir}: manifest checkpoint steps are not integers") from None
    state.lsn, state.chain, state.next_group_id = manifest.lsn, manifest.chain, manifest.next_group_id
    return Cut(cut_dir, manifest, state)


