"""restore(): the state a trainer resumes from, with exactly the in-flight work it lost.

The default point is the latest *committed* checkpoint: the model weights of
step S saw only groups trained at or before `checkpoint_begun(S)`, so that is
the LSN whose ownership state matches them (DESIGN section 3). The state
there is the newest usable cut at or before it plus the journal tail replayed
with the journal's own fold; what comes after it on disk is a dead tail,
read only for salvage.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import journal
from journal import (Discarded, Finished, Group, LoaderStateError, Owner, OsFileSystem, Reader, State,
                     list_segments)
from journal.layout import DirKind, cut_dir_name, describe_entries, dir_kind, replaced_name
from snapshot import (MANIFEST_NAME, SNAPSHOTS_DIR, DataPlane, Skipped, check_anchor, cut_dirs, read_cut, state_at,
                      write_cut)
from snapshot.manifest import decode as _decode_manifest

from .errors import JournalCorrupt, OwnershipError, RestoreError, Unreadable
from .rehydrate import ROW_CHANGED_POLICIES, rehydrate


@dataclass
class RecoveredGroup:
    """One group handed back to the trainer."""

    group_id: int
    idx: int
    task_name: str | None
    epoch: int | None
    fingerprint: bytes | None
    owner: Owner
    target_step: int | None = None
    policy_version: int | None = None
    locator: str | None = None
    replaces: int | None = None
    prompt: Any = None

    @classmethod
    def of(cls, g: Group) -> "RecoveredGroup":
        return cls(g.group_id, g.idx, g.task_name, g.epoch, g.fingerprint, g.owner, g.target_step,
                   g.policy_version, g.locator, g.replaces)


@dataclass
class RecoveredState:
    """What a trainer resumes from. Feed `loader_state` to `dataloader.load_state_dict`,
    redispatch `admitted` as-is (all their rollouts regenerate), send `reserved` through
    admission again, train `replay` directly, keep `spare` in the reserve. Then
    `Journal.open(path, resume=state)` continues the history at `lsn` (it records the
    salvaged and demoted groups, and moves each demoted group to a fresh group id)."""

    loader_state: Any
    reserved: list[RecoveredGroup]     # ordered by group id
    admitted: list[RecoveredGroup]
    replay: list[RecoveredGroup]
    spare: list[RecoveredGroup]
    lsn: int
    step: int | None
    counts: dict[str, int]            # the journal's per-owner counts at `lsn` (before salvage/demotion)
    source: str                       # "journal" or "cut"
    base_cut: str | None              # the cut the state was built on, if any
    skipped: list[Skipped] = field(default_factory=list)    # stale or incomplete cuts passed over
    demoted: list[RecoveredGroup] = field(default_factory=list)   # replay -> admitted: rows missing
    salvaged: list[RecoveredGroup] = field(default_factory=list)  # admitted -> replay: finished later
    changed_rows: list[RecoveredGroup] = field(default_factory=list)  # fingerprint differs, accepted
    run_id: bytes | None = None
    fold_state: State | None = None   # the journal's state at `lsn` (what resume continues from)
    # checkpoints begun at or before `lsn` whose checkpoint_committed came after it (on what
    # becomes the dead tail): their weights are durable, so a resume marks them committed again
    recommit: list[int] = field(default_factory=list)

    @property
    def groups(self) -> list[RecoveredGroup]:
        return self.reserved + self.admitted + self.replay + self.spare

    def seed_journal(self, journal_path: str, fs: OsFileSystem | None = None) -> str | None:
        """Make sure `<journal>/snapshots` holds a cut at `lsn` of this state.

        `Journal.open(path, resume=state)` calls it when the history on disk
        starts right after `lsn` (a fresh directory resumed from a cut, or one
        whose head was retired): without such a cut the journal could never be
        restored or compacted again. Returns the cut written, None if one with
        the same anchor was already there."""
        state = self.fold_state
        if state is None or state.lsn == 0 or self.run_id is None:
            return None
        for lsn, _timeline, cut_path in cut_dirs(journal_path):
            if lsn != state.lsn:
                continue
            try:
                with open(os.path.join(cut_path, MANIFEST_NAME), "rb") as f:
                    m = _decode_manifest(f.read(), cut_path)
            except (OSError, RestoreError):
                continue
            if m.run_id == self.run_id.hex() and m.chain == state.chain:
                return None
        fs = fs or journal.DEFAULT_FS
        target = os.path.join(journal_path, SNAPSHOTS_DIR, cut_dir_name(state.timeline, state.lsn))
        if os.path.exists(target):  # a damaged or foreign cut under that name: keep it, aside
            fs.rename(target, os.path.join(os.path.dirname(target),
                                           replaced_name(os.path.basename(target), int(time.time()))))
            fs.fsync_dir(os.path.dirname(target))
        return write_cut(target, state, run_id=self.run_id, timeline=state.timeline, fs=fs)


def _wrap_journal_errors(fn, *args, **kwargs):
    """Run `fn`, re-raising the journal's own errors as the `RestoreError` subclasses of check 9."""
    try:
        return fn(*args, **kwargs)
    except RestoreError:
        raise
    except journal.OwnershipError as exc:
        raise OwnershipError(str(exc), group_id=exc.group_id, lsn=exc.lsn) from exc
    except journal.JournalCorrupt as exc:
        raise JournalCorrupt(str(exc), segment=exc.segment, offset=exc.offset, lsn=exc.lsn) from exc
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        raise Unreadable(f"{exc.filename}: cannot be read: {exc.strerror}") from exc


def _decode_loader(state: State, where: str) -> Any:
    if state.loader is None:
        return None
    try:
        return state.loader.decode()
    except LoaderStateError as exc:
        raise JournalCorrupt(f"{where}: the loader state as of LSN {state.lsn} does not decode: {exc}",
                             lsn=state.lsn) from None


def _salvage(reader: Reader, state: State, step: int | None, data_plane: DataPlane) -> dict[int, tuple]:
    """Groups ADMITTED at the restore point that finished after it, with rows still held and
    generated by weights no newer than the checkpoint: group id -> (policy_version, locator)."""
    found: dict[int, tuple] = {}
    dropped: set[int] = set()
    for rec in reader.records(start_lsn=state.lsn + 1):
        for ev in rec.commit.events:
            if type(ev) is Finished:
                for i, gid in enumerate(ev.groups):
                    g = state.live.get(gid)
                    if g is None or g.owner != Owner.ADMITTED:
                        continue  # taken after the restore point: the loader's again
                    loc = ev.locators[i] if ev.locators is not None else None
                    # as the fold records it: the finishing version, else the admitting one
                    pv = ev.policy_version if ev.policy_version is not None else g.policy_version
                    found[gid] = (pv, loc)
            elif type(ev) is Discarded:
                dropped.update(ev.groups)
    limit = step if step is not None else -1
    return {gid: (pv, loc) for gid, (pv, loc) in found.items()
            if gid not in dropped and pv is not None and pv <= limit and loc is not None
            and data_plane.has(loc)}


def _empty_state() -> RecoveredState:
    """The state of a journal that holds nothing yet."""
    state = State()
    return RecoveredState(loader_state=None, reserved=[], admitted=[], replay=[], spare=[], lsn=0,
                          step=None, counts={o.name: 0 for o in Owner}, source="journal",
                          base_cut=None, fold_state=state)


def restore(path: str, at: str | int = "latest-checkpoint", *, step: int | None = None,
            dataset: Any = None, collate_fn: Callable | None = None, on_row_changed: str = "error",
            data_plane: DataPlane | None = None, salvage: bool = False) -> RecoveredState:
    """Rebuild the state to resume from. `path` is a journal directory or a cut directory;
    `at` is "latest-checkpoint" (default), "end" (forensics) or an LSN; `step=S` picks the
    committed checkpoint of step S. Raises a `RestoreError` subclass naming what failed."""
    if not (at in ("latest-checkpoint", "end") or isinstance(at, int) and not isinstance(at, bool)):
        raise ValueError(f"at must be 'latest-checkpoint', 'end' or an LSN, not {at!r}")
    if on_row_changed not in ROW_CHANGED_POLICIES:
        raise ValueError(f"on_row_changed must be one of {ROW_CHANGED_POLICIES}, not {on_row_changed!r}")
    path = os.path.abspath(path)
    if not os.path.exists(path):
        # a first start: nothing was ever written, so the state is the empty one, exactly as
        # for an empty journal directory (restore never creates the directory)
        if step is None and at in ("latest-checkpoint", "end", 0):
            return _empty_state()
        wanted = f"step {step}" if step is not None else f"LSN {at}"
        raise RestoreError(f"{path}: no such journal or cut directory, so there is no {wanted} "
                           f"to restore (a first start restores with the default at=)")
    kind, entries = dir_kind(path)
    if kind is DirKind.NOT_A_DIRECTORY:
        raise RestoreError(f"{path}: not a directory: restore takes a journal or a cut directory")
    if kind is DirKind.FOREIGN:
        raise RestoreError(f"{path}: neither a journal nor a cut directory (it holds "
                           f"{describe_entries(entries)}, none of them a segment, LOCK, torn/, "
                           f"snapshots/ or a cut file): check the path")
    reader = None
    salvaged_ids: dict[int, tuple] = {}
    if kind is DirKind.CUT:
        cut = read_cut(path)                                                     # 1-7
        cut.state.timeline = cut.manifest.timeline  # the anchor's timeline (a resume branches off it)
        owner_journal = os.path.dirname(os.path.dirname(path))
        if os.path.basename(os.path.dirname(path)) == SNAPSHOTS_DIR and list_segments(owner_journal):
            _wrap_journal_errors(lambda: check_anchor(Reader(owner_journal, "strict"), cut))  # 8
        if step is not None and cut.manifest.checkpoint_step != step:
            raise RestoreError(f"{path}: the cut is of step {cut.manifest.checkpoint_step}, not {step}")
        if isinstance(at, int) and not isinstance(at, bool) and at != cut.lsn:
            raise RestoreError(f"{path}: the cut is at LSN {cut.lsn}; a cut alone cannot restore LSN {at}")
        state, point_step, skipped, source, base = cut.state, cut.manifest.checkpoint_step, [], "cut", path
        run_id = bytes.fromhex(cut.manifest.run_id)
        # a cut alone knows nothing after it: only its own checkpoint is known to be durable
        committed_later = {point_step: cut.lsn} if point_step is not None else {}
    else:
        reader = _wrap_journal_errors(Reader, path, "strict")
        point = _wrap_journal_errors(state_at, path, at, step=step, reader=reader)
        state, point_step, skipped, source = point.state, point.step, point.skipped, "journal"
        base = point.base.path if point.base is not None else None
        run_id = reader.run_id
        committed_later = point.committed
        if salvage and data_plane is not None and point.lsn < point.end_lsn:
            salvaged_ids = _wrap_journal_errors(_salvage, reader, state, point_step, data_plane)
    by_owner: dict[Owner, list[RecoveredGroup]] = {o: [] for o in journal.LIVE_OWNERS}
    for g in state.groups():
        by_owner[g.owner].append(RecoveredGroup.of(g))
    salvaged, demoted = [], []
    admitted = []
    for g in by_owner[Owner.ADMITTED]:
        if g.group_id in salvaged_ids:
            g.policy_version, g.locator = salvaged_ids[g.group_id]
            g.owner = Owner.REPLAY
            salvaged.append(g)
        else:
            admitted.append(g)
    replay = []
    for g in by_owner[Owner.REPLAY]:
        if data_plane is not None and (g.locator is None or not data_plane.has(g.locator)):
            # regenerate it: no rows, so no data-plane locator (as the journal will record it)
            g.owner, g.locator = Owner.ADMITTED, None
            demoted.append(g)
            admitted.append(g)
        else:
            replay.append(g)
    replay += salvaged
    admitted.sort(key=lambda g: (g.target_step if g.target_step is not None else -1, g.group_id))
    result = RecoveredState(
        loader_state=_decode_loader(state, path),
        reserved=by_owner[Owner.RESERVED], admitted=admitted, replay=replay,
        spare=by_owner[Owner.SPARE], lsn=state.lsn, step=point_step,
        counts={o.name: state.counts[o] for o in Owner}, source=source, base_cut=base,
        skipped=skipped, demoted=demoted, salvaged=salvaged, run_id=run_id, fold_state=state,
        recommit=sorted((s for s, lsn in state.pending_checkpoints.items() if committed_later.get(s) == lsn),
                        key=state.pending_checkpoints.get))
    if dataset is not None:
        rehydrate(result.groups, dataset, collate_fn, on_row_changed, result.changed_rows)
    return result
