"""Writing and reading one cut directory.

Write protocol (crash-safe at every step): make `.tmp-<name>-<random>` beside
the final directory; write each file and fsync it; let the data plane save
into `data_plane/` and fsync what it wrote; write MANIFEST.json last and fsync
it; fsync the temporary directory; rename it to its final name; fsync the
parent. A directory whose name starts with `.tmp-` is never read as a cut; a
write that fails removes it (an OS error becomes `journal.JournalIOError`).

Read protocol: the chain of checks of DESIGN 6.1, in order; nothing is
unpickled before its sha256 matched, and then only with `weights_only=True`.

Besides the RESERVED and ADMITTED table, `rollout_recovery.pt` holds under
`terminal_owners` which group ids were trained or dropped (run-length
encoded, see `tables.encode_terminal`), so the state read back is exactly the
fold's: a tail replayed on top can check `admitted(replaces=g)` for a g that
ended before the cut, and the per-owner counts of TRAINED and DROPPED are
verified (check 6) like the live ones. Deleting a cut (retention) renames it
to a `.tmp-del-*` name first, so a crash never leaves a half-deleted cut listed.

torch (and `tables`, the tensor codec) is imported by the functions that write or read the
`.pt` files, not by this module, so `import snapshot` does not load torch.
"""

from __future__ import annotations

import hashlib
import io
import operator
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, runtime_checkable

from journal import DEFAULT_FS, Group, LoaderState, Owner, OsFileSystem, State

from . import manifest as mf
from .errors import ChecksumMismatch, CountMismatch, CorruptRecord, MissingFile, ManifestMissing, SchemaMismatch, \
    OrphanFile, TwoOwners
from .io_errors import io_step, remove_quietly

from journal.layout import (DATA_PLANE_DIR, DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE,  # noqa: F401
                            RESERVE_FILE, TMP_PREFIX, cut_tmp_name)
from journal.layout import LEDGER_FILE

TERMINAL_KEY = "terminal_owners"  # in rollout_recovery.pt: which ids were trained or dropped
DATASET_KEY = "dataset"  # in rollout_recovery.pt: the dataset size and row sample (optional)
_OWNER_OF = operator.attrgetter("owner")


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
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _fsync_tree(fs: OsFileSystem, root: str) -> None:
    """fsync, through the I/O seam, every file and directory the data plane wrote under `root`
    (it may not have); a symbolic link is refused (a cut never leads outside itself)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                raise ValueError(f"the data plane wrote a symbolic link {full}; a cut holds plain "
                                 "files only")
        for name in filenames:
            f = fs.open_append(os.path.join(dirpath, name))
            try:
                f.sync()
            finally:
                f.close()
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
              data_plane: DataPlane | None = None, fs: OsFileSystem | None = None,
              ledger=None) -> str:
    """Write `state` as a cut at `final_dir` (which must not exist) atomically; returns it.
    `ledger`: the `row_ledger.RowLedger` at `state.lsn`, when it is known."""
    fs = fs or DEFAULT_FS
    final_dir = os.path.abspath(final_dir)
    if os.path.exists(final_dir):
        raise FileExistsError(f"cut directory {final_dir} already exists")
    parent = os.path.dirname(final_dir)
    tmp = os.path.join(parent, cut_tmp_name(os.path.basename(final_dir), secrets.token_hex(4)))
    with io_step("write the cut", final_dir):
        fs.makedirs(parent)
        fs.mkdir(tmp)  # its entry needs no fsync of its own: the rename below is fsynced
        try:
            _fill(fs, tmp, state, run_id=run_id, timeline=timeline, data_plane=data_plane, ledger=ledger)
            fs.rename(tmp, final_dir)
        except BaseException:
            remove_quietly(fs, tmp)
            raise
        fs.fsync_dir(parent)  # (failing, it leaves a whole cut, which a retry reuses)
    return final_dir


def _fill(fs: OsFileSystem, tmp: str, state: State, *, run_id: bytes, timeline: int,
          data_plane: DataPlane | None, ledger=None) -> None:
    """Write every file of the cut of `state` into the empty directory `tmp`, manifest last,
    each fsynced, then the directory."""
    from .tables import encode_row_sample, encode_table, encode_terminal

    live = state.live
    recovery: list[Group] = []
    replay: list[Group] = []
    spare: list[Group] = []
    add = {Owner.RESERVED: recovery.append, Owner.ADMITTED: recovery.append,
           Owner.REPLAY: replay.append, Owner.SPARE: spare.append}
    ordered = list(map(live.__getitem__, sorted(live)))  # group-id order (dict order is nearly it)
    for g, owner in zip(ordered, map(_OWNER_OF, ordered)):
        add[owner](g)
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
    table = encode_table(recovery)
    table[TERMINAL_KEY] = encode_terminal(state.terminal.codes, state.terminal.sparse)
    table[DATASET_KEY] = encode_row_sample(state.dataset_size, state.row_sample)
    put(RECOVERY_FILE, _save_bytes(table))
    put(REPLAY_FILE, _save_bytes(encode_table(replay, owner=Owner.REPLAY)))
    if spare:
        put(RESERVE_FILE, _save_bytes(encode_table(spare, owner=Owner.SPARE)))
    if ledger is not None:
        put(LEDGER_FILE, _save_bytes(ledger.encode()))
    if data_plane is not None:
        dp = os.path.join(tmp, DATA_PLANE_DIR)
        fs.mkdir(dp)
        data_plane.save(dp, [g.copy() for g in replay])
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


def _load_pt(path: str, data: bytes) -> Any:
    import torch

    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # any unpickling failure of a file whose hash matched
        raise CorruptRecord(f"{path}: does not load with weights_only=True: {exc}") from None


def read_cut(cut_dir: str) -> Cut:
    """Load a cut, running checks 1-7 of DESIGN 6.1 in order; raises the first that fails."""
    from .tables import decode_row_sample, decode_table, decode_terminal

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
                    # the size on disk first: `entry.size` is the manifest's word and must not
                    # size a read (2^62 raised MemoryError, 2^30 allocated a GiB)
                    size = os.fstat(f.fileno()).st_size
                    if size != entry.size:
                        raise ChecksumMismatch(f"{cut_dir}: {name} has size {size}, the manifest "
                                               f"says size {entry.size}")
                    data = f.read(size + 1)
            except PermissionError as exc:
                raise MissingFile(f"{cut_dir}: {name} cannot be read: {exc}") from None
            size, digest = len(data), hashlib.sha256(data).hexdigest()
            contents[name] = data
        if size != entry.size or digest != entry.sha256:
            raise ChecksumMismatch(f"{cut_dir}: {name} has size {size} sha256 {digest[:16]}..., the "
                                   f"manifest says size {entry.size} sha256 {entry.sha256[:16]}...")
    if manifest.schema_version not in mf.READABLE_SCHEMAS:                  # 5
        raise SchemaMismatch(f"{cut_dir}: schema version {manifest.schema_version}, this code "
                             f"reads {sorted(mf.READABLE_SCHEMAS)}")
    for required in (DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE):
        if required not in contents:
            raise MissingFile(f"{cut_dir}: the manifest does not list {required}")
    live_owners = {Owner.RESERVED: RECOVERY_FILE, Owner.ADMITTED: RECOVERY_FILE,
                   Owner.REPLAY: REPLAY_FILE, Owner.SPARE: RESERVE_FILE}
    loaded: dict[str, list[Group]] = {}
    terminal_obj = dataset_obj = None
    for name, allowed in ((RECOVERY_FILE, frozenset({Owner.RESERVED, Owner.ADMITTED})),
                          (REPLAY_FILE, frozenset({Owner.REPLAY})),
                          (RESERVE_FILE, frozenset({Owner.SPARE}))):
        if name not in contents:
            loaded[name] = []
            continue
        where = os.path.join(cut_dir, name)
        table = _load_pt(where, contents[name])
        loaded[name] = decode_table(table, where, allowed)
        if name == RECOVERY_FILE:
            terminal_obj = table.get(TERMINAL_KEY)
            if terminal_obj is None:
                raise CorruptRecord(f"{where}: no {TERMINAL_KEY!r} entry")
            dataset_obj = table.get(DATASET_KEY)
    if not isinstance(manifest.next_group_id, int) or manifest.next_group_id < 0:
        raise CorruptRecord(f"{cut_dir}: manifest next group id {manifest.next_group_id!r} is negative")
    where = os.path.join(cut_dir, RECOVERY_FILE)
    dense, sparse = decode_terminal(terminal_obj, f"{where} {TERMINAL_KEY}", manifest.next_group_id)
    have_counts = {owner: 0 for owner in Owner}
    for owner, name in live_owners.items():
        have_counts[owner] = sum(1 for g in loaded[name] if g.owner == owner)
    sparse_codes = list(sparse.values())
    for owner in (Owner.TRAINED, Owner.DROPPED):
        have_counts[owner] = dense.count(int(owner)) + sparse_codes.count(int(owner))
    for owner in Owner:                                                     # 6
        want = manifest.counts.get(owner.name)
        if have_counts[owner] != want:
            name = live_owners.get(owner, f"{RECOVERY_FILE} {TERMINAL_KEY}")
            raise CountMismatch(f"{cut_dir}: {name} holds {have_counts[owner]} {owner.name} groups, "
                                f"the manifest says {want}")
    state = State()
    seen: dict[int, str] = {}
    for name in (RECOVERY_FILE, REPLAY_FILE, RESERVE_FILE):                 # 7
        for g in loaded[name]:
            gid = g.group_id
            if gid in seen:
                raise TwoOwners(f"{cut_dir}: group {gid} is in both {seen[gid]} and {name}")
            if gid >= manifest.next_group_id:
                raise CorruptRecord(f"{cut_dir}: group {gid} in {name} is not below the "
                                    f"manifest's next group id {manifest.next_group_id}")
            if (gid < len(dense) and dense[gid]) or gid in sparse:
                code = dense[gid] if gid < len(dense) else sparse[gid]
                raise TwoOwners(f"{cut_dir}: group {gid} is live in {name} and {Owner(code).name} in "
                                f"{RECOVERY_FILE} {TERMINAL_KEY}")
            seen[gid] = name
            state.live[gid] = g
    state.terminal.codes, state.terminal.sparse = dense, sparse
    if dataset_obj is not None:  # absent in cuts written before the dataset was recorded
        state.dataset_size, state.row_sample = decode_row_sample(dataset_obj,
                                                                 f"{where} {DATASET_KEY}")
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
    state.timeline = manifest.timeline  # with lsn and chain: the anchor (a fold on top keeps it)
    return Cut(cut_dir, manifest, state)


