"""Writing one cut directory, and what it holds.

Write protocol (crash-safe at every step): make `.tmp-<name>-<random>` beside
the final directory; write each file and fsync it; let the data plane save
into `data_plane/` and fsync what it wrote; write MANIFEST.json last and fsync
it; fsync the temporary directory; rename it to its final name; fsync the
parent. A directory whose name starts with `.tmp-` is never read as a cut; a
write that fails removes it (an OS error becomes `journal.JournalIOError`).
Reading a cut back is `checks.read_cut`: the chain of checks, in order.

Besides the RESERVED and ADMITTED table, `rollout_recovery.pt` holds under
`terminal_owners` which group ids were trained or dropped (run-length
encoded, see `tables.encode_terminal`), so the state read back is exactly the
fold's: a tail replayed on top can check `admitted(replaces=g)` for a g that
ended before the cut, and the per-owner counts of TRAINED and DROPPED are
verified like the live ones. It also holds the `OPTIONAL_ENTRIES`, which cuts
written before an entry existed lack. Deleting a cut (retention) renames it
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
from typing import TYPE_CHECKING, Any, Callable

from journal import Group, Owner, State, layout, position, state_file
from journal.vfs import DEFAULT_FS, OsFileSystem
from journal.identity import to_hex

from . import manifest as mf
from .data_plane import DataPlane
from .errors import RestoreError
from .io_errors import io_step, remove_quietly

if TYPE_CHECKING:
    from .row_ledger import RowLedger

from journal.layout import (DATA_PLANE_DIR, DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE,  # noqa: F401
                            RESERVE_FILE, cut_tmp_name)
from journal.layout import LEDGER_FILE, POSITION_FILE, STATE_FILE

TERMINAL_KEY = "terminal_owners"  # in rollout_recovery.pt: which ids were trained or dropped
DATASET_KEY = "dataset"  # in rollout_recovery.pt: the dataset size and row sample (optional)
_OWNER_OF = operator.attrgetter("owner")


@dataclass(frozen=True)
class OptionalEntry:
    """An entry of `rollout_recovery.pt` beside the group table that older cuts lack. `encode`
    gives its value for a state (None: write no entry); `decode(value, where, state)` validates
    a value read back (after its file's sha256 matched), raising `CorruptRecord` naming `where`,
    and sets it on `state`. Both import torch themselves when they need it."""

    key: str
    encode: Callable[[State], Any]
    decode: Callable[[Any, str, State], None]


def _encode_dataset(state: State) -> dict:
    from .tables import encode_row_sample

    return encode_row_sample(state.dataset_size, state.row_sample)


def _decode_dataset(value: Any, where: str, state: State) -> None:
    from .tables import decode_row_sample

    state.dataset_size, state.row_sample = decode_row_sample(value, where)


# written by `write_cut` and read back by `read_cut` (check 7) in this order
OPTIONAL_ENTRIES = (OptionalEntry(DATASET_KEY, _encode_dataset, _decode_dataset),)


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
            fs.fsync_file(os.path.join(dirpath, name))
        fs.fsync_dir(dirpath)


def file_sha256(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of the file at `path`, read in chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def write_cut(final_dir: str, state: State, *, run_id: bytes, timeline: int,
              data_plane: DataPlane | None = None, fs: OsFileSystem | None = None,
              ledger=None, where: position.Position | None = None) -> str:
    """Write `state` as a cut at `final_dir` (which must not exist) atomically; returns it.
    `ledger`: the `row_ledger.RowLedger` at `state.lsn`, when it is known; `where`: the
    position of the frame holding commit `state.lsn` in the journal, when it is known."""
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
            _fill(fs, tmp, state, run_id=run_id, timeline=timeline, data_plane=data_plane, ledger=ledger,
                  where=where)
            fs.rename(tmp, final_dir)
        except BaseException:
            remove_quietly(fs, tmp)
            raise
        fs.fsync_dir(parent)  # (failing, it leaves a whole cut, which a retry reuses)
    return final_dir


def _fill(fs: OsFileSystem, tmp: str, state: State, *, run_id: bytes, timeline: int,
          data_plane: DataPlane | None, ledger=None, where: position.Position | None = None) -> None:
    """Write every file of the cut of `state` into the empty directory `tmp`, manifest last,
    each fsynced, then the directory."""
    from .tables import encode_table, encode_terminal

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
        _write_synced(fs, os.path.join(tmp, name), data)
        files[name] = mf.FileEntry(len(data), hashlib.sha256(data).hexdigest())

    loader = state.loader.decode() if state.loader is not None else None
    put(DATALOADER_FILE, _save_bytes(loader))
    # one attribute pass per table's groups, for the table and the state file's live blocks
    columns = [state_file.group_columns(groups) for groups in (recovery, replay, spare)]
    table = encode_table(RECOVERY_FILE, columns[0])
    table[TERMINAL_KEY] = encode_terminal(state.terminal.codes, state.terminal.sparse)
    for entry in OPTIONAL_ENTRIES:
        value = entry.encode(state)
        if value is not None:
            table[entry.key] = value
    put(RECOVERY_FILE, _save_bytes(table))
    put(REPLAY_FILE, _save_bytes(encode_table(REPLAY_FILE, columns[1], owner=Owner.REPLAY)))
    if spare:
        put(RESERVE_FILE, _save_bytes(encode_table(RESERVE_FILE, columns[2], owner=Owner.SPARE)))
    if ledger is not None:
        put(LEDGER_FILE, _save_bytes(ledger.encode()))
    # what Journal.open folds the tail onto
    put(STATE_FILE, state_file.encode(state, run_id, live_columns=columns))
    if where is not None:  # where a restart reads the journal from
        put(POSITION_FILE, position.encode(where))
    if data_plane is not None:
        with_rows = replay + [g for g in recovery if g.rollouts is not None
                              and (g.rollouts.sealed or g.rollouts.progress is not None)]
        files.update(_save_data_plane(fs, tmp, data_plane, with_rows))
    manifest = _manifest_of(state, run_id, timeline, loader is not None, files)
    _write_synced(fs, os.path.join(tmp, mf.MANIFEST_NAME), mf.encode(manifest))
    fs.fsync_dir(tmp)


def _write_synced(fs: OsFileSystem, path: str, data: bytes) -> None:
    """A file of the cut, fsynced; its directory is fsynced once, after the manifest."""
    with fs.durable_file(path, sync_dir=False) as f:
        f.write(data)


def _save_data_plane(fs: OsFileSystem, tmp: str, data_plane: DataPlane,
                     groups: list[Group]) -> dict[str, mf.FileEntry]:
    """Let the data plane save the rows of `groups` under `tmp/data_plane/`, fsync them; the
    manifest entry of every file it wrote."""
    dp = os.path.join(tmp, DATA_PLANE_DIR)
    fs.mkdir(dp)
    data_plane.save(dp, [g.copy() for g in groups])
    _fsync_tree(fs, dp)
    files = {}
    for dirpath, _, filenames in os.walk(dp):
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, tmp).replace(os.sep, "/")
            size, digest = file_sha256(full)
            files[rel] = mf.FileEntry(size, digest)
    return files


def _manifest_of(state: State, run_id: bytes, timeline: int, has_loader_state: bool,
                 files: dict[str, mf.FileEntry]) -> mf.Manifest:
    step = next((s for s, lsn in {**state.pending_checkpoints, **state.committed_checkpoints}.items()
                 if lsn == state.lsn), None)
    return mf.Manifest(
        format=mf.FORMAT_NAME, schema_version=mf.SCHEMA_VERSION, run_id=run_id.hex(),
        timeline=timeline, lsn=state.lsn, chain=state.chain, checkpoint_step=step,
        counts={o.name: state.counts[o] for o in Owner}, next_group_id=state.next_group_id,
        pending_checkpoints={str(k): v for k, v in state.pending_checkpoints.items()},
        committed_checkpoints={str(k): v for k, v in state.committed_checkpoints.items()},
        has_loader_state=has_loader_state, files=files, created_unix=time.time(),
        loader_epoch=state.loader.epoch if state.loader is not None else None,
        identity=to_hex(state.identity))


def base_cut_writer(state: State, run_id: bytes | None,
                    ledger: Callable[[], RowLedger | None]) -> Callable[[str, OsFileSystem], str | None] | None:
    """The plan's `write_base_cut` for `state`: make sure `<journal>/snapshots` holds a cut at
    its LSN (none for an empty state), with the audit's row ledger (`ledger()`) when it is known. A cut
    with the same anchor already there is kept; a
    damaged or foreign one under that name is renamed aside first. Returns the cut written."""
    if state.lsn == 0 or run_id is None:
        return None

    def write(journal_path: str, fs: OsFileSystem) -> str | None:
        for lsn, _timeline, cut_path in layout.cut_dirs(journal_path):
            if lsn != state.lsn:
                continue
            try:
                with open(os.path.join(cut_path, layout.MANIFEST_NAME), "rb") as f:
                    m = mf.decode(f.read(), cut_path)
            except (OSError, RestoreError):
                continue
            if m.run_id == run_id.hex() and m.chain == state.chain:
                return None
        target = os.path.join(journal_path, layout.SNAPSHOTS_DIR, layout.cut_dir_name(state.timeline, state.lsn))
        if os.path.exists(target):
            fs.rename(target, os.path.join(os.path.dirname(target),
                                           layout.replaced_name(os.path.basename(target), int(time.time()))))
            fs.fsync_dir(os.path.dirname(target))
        return write_cut(target, state, run_id=run_id, timeline=state.timeline, fs=fs, ledger=ledger())
    return write
