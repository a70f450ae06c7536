"""Reading a cut: the chain of checks, in order, each a small function with its own error class.

`CHECKS` is the chain. Its order is the numbering: `journal-inspect cuts`, `replay.verify`
and the README show these numbers and names, and `check_of(error)` finds the check an error
belongs to. `read_cut` runs checks 1-7 on the cut directory alone; check 8 (the anchor)
needs the journal and is `catalog.check_anchor` / `catalog.anchor_problem`.

The order is what keeps a hostile cut harmless: the manifest's names are validated (no `..`,
no absolute path, no link out of the cut) before any file is opened (1); a file's size comes
from the file system and is compared with the manifest before the file is read, and its
sha256 is compared before anything is unpickled (4); every `.pt` is then loaded with
`torch.load(..., weights_only=True)` only. The first check that fails raises; the later
ones do not run.

torch (with `tables`, the tensor codec) is imported by the functions that load `.pt`
files, not by this module, so `import snapshot` does not load torch.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from journal import Group, Owner, State, StateFileCorrupt, state_file
from journal.state import LoaderState
from journal.identity import from_hex, to_hex
from journal.layout import STATE_FILE

from . import cut as cut_module, manifest as mf
from .cut import DATA_PLANE_DIR, DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE, \
    RESERVE_FILE, TERMINAL_KEY, Cut, file_sha256
from .errors import ChecksumMismatch, CorruptRecord, CountMismatch, JournalMismatch, ManifestMissing, \
    MissingFile, OrphanFile, RestoreError, SchemaMismatch, TwoOwners

# every group table: its file and the owners its rows may have, in the order they are read
TABLE_OWNERS = ((RECOVERY_FILE, frozenset({Owner.RESERVED, Owner.ADMITTED})),
                (REPLAY_FILE, frozenset({Owner.REPLAY})),
                (RESERVE_FILE, frozenset({Owner.SPARE})))
REQUIRED_FILES = (DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE)  # what every readable schema lists
_FILE_OF_OWNER = {owner: name for name, owners in TABLE_OWNERS for owner in owners}


@dataclass
class Reading:
    """What the checks passed so far established about one cut directory."""

    cut_dir: str
    keep_contents: bool = True  # False: check 4 streams every file (only checks 1-4 run)
    manifest: mf.Manifest | None = None
    paths: dict[str, str] = field(default_factory=dict)      # manifest name -> path in the cut
    contents: dict[str, bytes] = field(default_factory=dict)  # every file but the data plane's
    groups: dict[str, list[Group]] = field(default_factory=dict)  # table file -> its groups
    recovery_table: dict = field(default_factory=dict)        # rollout_recovery.pt as loaded
    terminal: tuple[bytearray, dict[int, int]] = field(default_factory=lambda: (bytearray(), {}))
    state: State = field(default_factory=State)

    def where(self, name: str) -> str:
        return os.path.join(self.cut_dir, name)


# -- 1. manifest -----------------------------------------------------------------------------

def manifest_reads(r: Reading) -> None:
    """MANIFEST.json exists, parses, and names only plain paths inside the cut (`UnsafePath`)."""
    mpath = r.where(mf.MANIFEST_NAME)
    try:
        with open(mpath, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ManifestMissing(f"{r.cut_dir}: no {mf.MANIFEST_NAME} (an incomplete or foreign cut)") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise ManifestMissing(f"{mpath}: cannot be read: {exc}") from None
    r.manifest = mf.decode(raw, r.cut_dir)
    r.paths = {name: mf.safe_relpath(name, r.cut_dir) for name in r.manifest.files}


# -- 2. listed files present -----------------------------------------------------------------

def listed_files_exist(r: Reading) -> None:
    for name, path in r.paths.items():
        if not os.path.isfile(path):
            raise MissingFile(f"{r.cut_dir}: {name} is listed in the manifest but missing")


# -- 3. no unlisted files --------------------------------------------------------------------

def no_unlisted_files(r: Reading) -> None:
    """Every file in the cut (and every link to a directory) is listed by the manifest."""
    for dirpath, dirnames, filenames in os.walk(r.cut_dir):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = os.path.relpath(os.path.join(dirpath, name), r.cut_dir).replace(os.sep, "/")
            if rel != mf.MANIFEST_NAME and rel not in r.manifest.files:
                raise OrphanFile(f"{r.cut_dir}: {rel} is in the cut but not in its manifest")


# -- 4. sha256 -------------------------------------------------------------------------------

def sizes_and_hashes_match(r: Reading) -> None:
    """Each file's size and sha256 are the manifest's; the bytes of every file but the data
    plane's are kept for the later checks unless `r.keep_contents` is False (nothing is
    unpickled here)."""
    for name, path in r.paths.items():
        entry = r.manifest.files[name]
        if name.startswith(DATA_PLANE_DIR + "/") or not r.keep_contents:
            size, digest = file_sha256(path)
        else:
            data = _read_sized(r, name, path, entry.size)
            size, digest = len(data), hashlib.sha256(data).hexdigest()
            r.contents[name] = data
        if size != entry.size or digest != entry.sha256:
            raise ChecksumMismatch(f"{r.cut_dir}: {name} has size {size} sha256 {digest[:16]}..., the "
                                   f"manifest says size {entry.size} sha256 {entry.sha256[:16]}...")


def _read_sized(r: Reading, name: str, path: str, listed_size: int) -> bytes:
    """The bytes of `path`, once its size on disk equals `listed_size`. The size on disk sizes
    the read: the manifest's number is untrusted and never allocates anything."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != listed_size:
                raise ChecksumMismatch(f"{r.cut_dir}: {name} has size {size}, the manifest "
                                       f"says size {listed_size}")
            return f.read(size + 1)
    except PermissionError as exc:
        raise MissingFile(f"{r.cut_dir}: {name} cannot be read: {exc}") from None


# -- 5. schema version -----------------------------------------------------------------------

def schema_is_readable(r: Reading) -> None:
    """The manifest's schema version is one this code reads, the files every such schema holds
    are listed, and each group table decodes under it (a table states its own version; a
    record that does not decode is `CorruptRecord` where it is met), as do the terminal owners
    the counts of check 6 need."""
    mf.check_schema(r.manifest.schema_version, r.cut_dir)
    for required in REQUIRED_FILES:
        if required not in r.contents:
            raise MissingFile(f"{r.cut_dir}: the manifest does not list {required}")
    _decode_tables(r)
    _decode_terminal(r)


def _decode_tables(r: Reading) -> None:
    from .tables import decode_table

    for name, allowed in TABLE_OWNERS:
        if name not in r.contents:
            r.groups[name] = []
            continue
        table = load_pt(r.where(name), r.contents[name])
        r.groups[name] = decode_table(table, name, r.where(name), allowed, r.manifest.schema_version)
        if name == RECOVERY_FILE:
            if table.get(TERMINAL_KEY) is None:
                raise CorruptRecord(f"{r.where(name)}: no {TERMINAL_KEY!r} entry")
            r.recovery_table = table


def _decode_terminal(r: Reading) -> None:
    from .tables import decode_terminal

    next_id = r.manifest.next_group_id
    if not isinstance(next_id, int) or next_id < 0:
        raise CorruptRecord(f"{r.cut_dir}: manifest next group id {next_id!r} is negative")
    r.terminal = decode_terminal(r.recovery_table[TERMINAL_KEY],
                                 f"{r.where(RECOVERY_FILE)} {TERMINAL_KEY}", next_id)


def load_pt(path: str, data: bytes) -> Any:
    """Unpickle `data` (the bytes of `path`, whose sha256 matched) with `weights_only=True`."""
    import torch

    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # any unpickling failure of a file whose hash matched
        raise CorruptRecord(f"{path}: does not load with weights_only=True: {exc}") from None


# -- 6. group counts -------------------------------------------------------------------------

def counts_match(r: Reading) -> None:
    """Per owner, the tables (live owners) and the terminal owners hold the manifest's count."""
    dense, sparse = r.terminal
    have = {owner: sum(1 for g in r.groups[name] if g.owner == owner)
            for owner, name in _FILE_OF_OWNER.items()}
    sparse_codes = list(sparse.values())
    for owner in (Owner.TRAINED, Owner.DROPPED):
        have[owner] = dense.count(int(owner)) + sparse_codes.count(int(owner))
    for owner in Owner:
        want = r.manifest.counts.get(owner.name)
        if have.get(owner, 0) != want:
            name = _FILE_OF_OWNER.get(owner, f"{RECOVERY_FILE} {TERMINAL_KEY}")
            raise CountMismatch(f"{r.cut_dir}: {name} holds {have.get(owner, 0)} {owner.name} groups, "
                                f"the manifest says {want}")


# -- 7. records ------------------------------------------------------------------------------

def records_are_sound(r: Reading) -> None:
    """Every group has one owner and an id below the next group id, and every other record
    (the optional entries, the loader state, the manifest's checkpoints) is well-formed; the
    state read back is built on the way."""
    _one_owner_each(r)
    where = r.where(RECOVERY_FILE)
    for entry in cut_module.OPTIONAL_ENTRIES:  # absent in cuts written before the entry existed
        obj = r.recovery_table.get(entry.key)
        if obj is not None:
            entry.decode(obj, f"{where} {entry.key}", r.state)
    _loader_state(r)
    _manifest_fields(r)


def _one_owner_each(r: Reading) -> None:
    dense, sparse = r.terminal
    next_id = r.manifest.next_group_id
    seen: dict[int, str] = {}
    for name, _owners in TABLE_OWNERS:
        for g in r.groups[name]:
            gid = g.group_id
            if gid in seen:
                raise TwoOwners(f"{r.cut_dir}: group {gid} is in both {seen[gid]} and {name}")
            if gid >= next_id:
                raise CorruptRecord(f"{r.cut_dir}: group {gid} in {name} is not below the "
                                    f"manifest's next group id {next_id}")
            if (gid < len(dense) and dense[gid]) or gid in sparse:
                code = dense[gid] if gid < len(dense) else sparse[gid]
                raise TwoOwners(f"{r.cut_dir}: group {gid} is live in {name} and {Owner(code).name} in "
                                f"{RECOVERY_FILE} {TERMINAL_KEY}")
            seen[gid] = name
            r.state.live[gid] = g
    r.state.terminal.codes, r.state.terminal.sparse = dense, sparse


def _loader_state(r: Reading) -> None:
    loader = load_pt(r.where(DATALOADER_FILE), r.contents[DATALOADER_FILE])
    if (loader is not None) != r.manifest.has_loader_state:
        raise CorruptRecord(f"{r.cut_dir}: {DATALOADER_FILE} disagrees with the manifest about "
                            "holding a loader state")
    try:
        r.state.loader = (LoaderState.from_object(loader, r.manifest.loader_epoch)
                          if loader is not None else None)
    except ValueError as exc:
        raise CorruptRecord(f"{r.cut_dir}: {DATALOADER_FILE}: {exc}") from None


def _manifest_fields(r: Reading) -> None:
    """The counts, checkpoints, run identity and anchor (timeline, LSN, chain) of the state, from
    the manifest."""
    m, state = r.manifest, r.state
    try:
        for o in Owner:
            state.counts[o] = int(m.counts.get(o.name, 0))
        state.pending_checkpoints = {int(k): v for k, v in m.pending_checkpoints.items()}
        state.committed_checkpoints = {int(k): v for k, v in m.committed_checkpoints.items()}
    except ValueError:
        raise CorruptRecord(f"{r.cut_dir}: manifest checkpoint steps are not integers") from None
    try:
        state.identity = from_hex(m.identity)
    except ValueError:
        raise CorruptRecord(f"{r.cut_dir}: manifest identity fingerprints are not hex") from None
    state.lsn, state.chain, state.next_group_id = m.lsn, m.chain, m.next_group_id
    state.timeline = m.timeline  # with lsn and chain: the anchor (a fold on top keeps it)


# -- the chain -------------------------------------------------------------------------------

class CutCheck(NamedTuple):
    number: int                               # its place in the chain, from 1
    error: type[RestoreError]                 # what it raises (subclasses included)
    what: str                                 # its name in reports
    run: Callable[[Reading], None] | None     # None: needs the journal (see `catalog`)


def _numbered(*checks: tuple) -> tuple[CutCheck, ...]:
    return tuple(CutCheck(number, *check) for number, check in enumerate(checks, 1))


CHECKS = _numbered(
    (ManifestMissing, "manifest", manifest_reads),
    (MissingFile, "listed file missing", listed_files_exist),
    (OrphanFile, "file not in manifest", no_unlisted_files),
    (ChecksumMismatch, "sha256", sizes_and_hashes_match),
    (SchemaMismatch, "schema version", schema_is_readable),
    (CountMismatch, "group counts", counts_match),
    (CorruptRecord, "records", records_are_sound),
    (JournalMismatch, "anchor on the journal", None),  # catalog.check_anchor, with a reader
)


FILE_CHECKS = CHECKS[:4]  # manifest, listed files, no unlisted files, sha256: nothing is unpickled


def check_of(error: BaseException | type) -> CutCheck | None:
    """The check an error (or error class) of the chain belongs to; None for any other."""
    cls = error if isinstance(error, type) else type(error)
    return next((c for c in CHECKS if issubclass(cls, c.error)), None)


def read_cut(cut_dir: str, *, tables: bool = True) -> Cut:
    """Load the cut at `cut_dir` through every check of `CHECKS` that needs no journal, in
    order; raises the first that fails.

    `tables=False` (a restore): after checks 1-4 (every file's sha256, the `.pt` tables' too),
    the state is the cut's journal state file's when it decodes and agrees with the manifest
    (`_state_file_agrees`), and the `.pt` tables are not loaded: torch is imported only by a
    loader state that holds a tensor. A cut without a state file, or whose state file does not
    decode or disagrees, is read as with `tables=True`."""
    r = Reading(os.path.abspath(cut_dir))
    if not tables:
        for check in FILE_CHECKS:
            check.run(r)
        state = _from_state_file(r)
        if state is not None:
            return Cut(r.cut_dir, r.manifest, state)
        r = Reading(r.cut_dir)
    for check in CHECKS:
        if check.run is not None:
            check.run(r)
    return Cut(r.cut_dir, r.manifest, r.state)


def _from_state_file(r: Reading) -> State | None:
    """The state of the cut's journal state file (its sha256 matched: check 4), None when the
    cut has none, or it does not decode or disagrees with the manifest."""
    data = r.contents.get(STATE_FILE)
    if data is None or r.manifest.schema_version not in mf.READABLE_SCHEMAS:
        return None
    try:
        state, run_id = state_file.decode(data, r.where(STATE_FILE))
    except StateFileCorrupt:
        return None
    return state if _state_file_agrees(r.manifest, state, run_id) else None


def _state_file_agrees(m: mf.Manifest, state: State, run_id: bytes) -> bool:
    """Whether a state file's state is the one the manifest describes: run, anchor, next group
    id, per-owner counts, checkpoints, loader state (held or not, and its epoch), identity."""
    loader = state.loader
    return (run_id.hex() == m.run_id and (state.timeline, state.lsn, state.chain) == (m.timeline, m.lsn, m.chain)
            and state.next_group_id == m.next_group_id
            and {o.name: state.counts[o] for o in Owner} == m.counts
            and {str(k): v for k, v in state.pending_checkpoints.items()} == m.pending_checkpoints
            and {str(k): v for k, v in state.committed_checkpoints.items()} == m.committed_checkpoints
            and (loader is not None) == m.has_loader_state
            and (loader.epoch if loader is not None else None) == m.loader_epoch
            and to_hex(state.identity) == m.identity)


def check_cut_files(cut_dir: str) -> mf.Manifest:
    """Run checks 1-4 (`FILE_CHECKS`) on the cut at `cut_dir`, every file's sha256 streamed, and
    return its manifest; raises the first that fails. Nothing is unpickled and torch is not
    imported: the contents (checks 5-7) are `read_cut`'s."""
    r = Reading(os.path.abspath(cut_dir), keep_contents=False)
    for check in FILE_CHECKS:
        check.run(r)
    return r.manifest
