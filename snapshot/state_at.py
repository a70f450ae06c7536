"""The state at one point of the active history: newest usable cut at or before it, plus
the journal tail replayed on top with the journal's own fold.

Both the compactor and `replay.restore` stand on this; correctness never
depends on a cut existing (without one the whole history is folded).
"""

from __future__ import annotations

import collections
import gc
import itertools
import os
from dataclasses import dataclass, field
from typing import Iterator

from journal import JournalCorrupt, OwnershipError, Reader, State, checkpoint_markers, fold_records
from journal.history import NoSuchPoint, restore_point
from journal.layout import SNAPSHOTS_DIR, cut_dir_name, parse_cut_dir_name  # noqa: F401

from . import manifest as mf
from .cut import Cut, read_cut
from .errors import JournalMismatch, RestoreError


def cut_dirs(journal_path: str) -> list[tuple[int, int, str]]:
    """(lsn, timeline, path) of every cut directory under `<journal>/snapshots`, newest LSN first.
    Temporary directories of an unfinished compaction are never listed."""
    root = os.path.join(journal_path, SNAPSHOTS_DIR)
    if not os.path.isdir(root):
        return []
    out = []
    for name in os.listdir(root):
        parsed = parse_cut_dir_name(name)  # never a temporary (`.tmp-*`) directory
        if parsed is not None:
            out.append((parsed[1], parsed[0], os.path.join(root, name)))
    out.sort(reverse=True)
    return out


def anchor_problem(reader: Reader, cut: Cut) -> str | None:
    """Why `cut` is not a point of `reader`'s active history (None when it is)."""
    m = cut.manifest
    if reader.run_id is not None and m.run_id != reader.run_id.hex():
        return f"cut belongs to run {m.run_id}, the journal is run {reader.run_id.hex()}"
    if m.lsn == 0:
        return None
    lineage = reader.lineage()
    for rec in reader.records(start_lsn=m.lsn, stop_lsn=m.lsn):
        if rec.timeline != m.timeline or rec.chain != m.chain:
            return (f"cut anchor (timeline {m.timeline}, LSN {m.lsn}, chain {m.chain:#010x}) is not on the "
                    f"active history (timeline {rec.timeline}, chain {rec.chain:#010x} at that LSN): "
                    "a stale cut of a dead branch")
        return None
    first = next((s for tl in lineage for s in tl.segments), None)
    if first is not None and first.first_lsn == m.lsn + 1 and first.header.chain_seed == m.chain:
        return None  # the segments before the cut were retired; the next one continues its chain
    return f"the journal has no commit at LSN {m.lsn} to check the cut's anchor against"


@dataclass
class Skipped:
    path: str
    reason: str


@dataclass
class Point:
    """Where a restore or compaction lands: the LSN, its checkpoint step, the state there."""

    lsn: int
    step: int | None
    state: State
    base: Cut | None
    end_lsn: int
    skipped: list[Skipped] = field(default_factory=list)
    # every checkpoint committed on the active history, up to its end: step -> checkpoint_begun LSN
    # (a step pending at `lsn` whose commit marker is later has durable weights all the same)
    committed: dict[int, int] = field(default_factory=dict)


def usable_cuts(reader: Reader, journal_path: str, skipped: list[Skipped]) -> Iterator[Cut]:
    """Cuts under the journal that pass every check and sit on the active history, newest first;
    every other one is appended to `skipped` with the reason."""
    for view in _anchored_cuts(reader, journal_path, skipped):
        try:
            yield read_cut(view.path)
        except RestoreError as exc:
            skipped.append(Skipped(view.path, f"{type(exc).__name__}: {exc}"))


class _ManifestView:
    """A cut known by its manifest only (enough for `anchor_problem`); loaded when used."""

    def __init__(self, path: str, manifest) -> None:
        self.path, self.manifest = path, manifest

    @property
    def lsn(self) -> int:
        return self.manifest.lsn


def _anchored_cuts(reader: Reader, journal_path: str, skipped: list[Skipped]) -> list[_ManifestView]:
    """Cuts whose manifest reads and whose anchor is on the active history, newest first; the
    others are reported. Only manifests are read here: nothing is hashed or unpickled."""
    out = []
    for _lsn, _timeline, path in cut_dirs(journal_path):
        try:
            with open(os.path.join(path, mf.MANIFEST_NAME), "rb") as f:
                raw = f.read()
            view = _ManifestView(path, mf.decode(raw, path))
        except FileNotFoundError:
            skipped.append(Skipped(path, f"ManifestMissing: {path}: no {mf.MANIFEST_NAME} "
                                         "(an incomplete or foreign cut)"))
            continue
        except (OSError, RestoreError) as exc:
            name = type(exc).__name__ if isinstance(exc, RestoreError) else "ManifestMissing"
            skipped.append(Skipped(path, f"{name}: {exc}"))
            continue
        problem = anchor_problem(reader, view)
        if problem is not None:
            skipped.append(Skipped(path, f"JournalMismatch: {problem}"))
            continue
        out.append(view)
    return out


def _load(views: list[_ManifestView], below: int | None, skipped: list[Skipped]) -> Cut | None:
    """The newest of `views` at or before `below` (any if None) that passes every check of
    `read_cut`; those that fail are reported and dropped from `views`."""
    for v in list(views):
        if below is not None and v.lsn > below:
            continue
        try:
            cut = read_cut(v.path)
        except RestoreError as exc:
            skipped.append(Skipped(v.path, f"{type(exc).__name__}: {exc}"))
            views.remove(v)
            continue
        m, seen = cut.manifest, v.manifest
        if (m.run_id, m.timeline, m.lsn, m.chain) != (seen.run_id, seen.timeline, seen.lsn, seen.chain):
            skipped.append(Skipped(v.path, "JournalMismatch: the cut's manifest changed while it was read"))
            views.remove(v)
            continue
        return cut
    return None


_MAX_UNDO_COMMITS = 100_000  # beyond this, going back means folding again from a cut
_CHUNK = 512                # commits folded between two trims of the undo records


class _GoBack:
    """The undo records of the commits a fold may have to take back: those after `floor`, the
    newest LSN known to be at or before wherever the restore will land. The tail is folded in
    chunks; after each, the floor rises with the checkpoint markers folded so far and older
    undo records are dropped. At most _MAX_UNDO_COMMITS are kept (`overflow` then says going
    back needs a fold from a cut instead)."""

    def __init__(self, state: State, mode: str, step: int | None = None, lsn: int | None = None):
        self.state, self.mode, self.step = state, mode, step  # mode: latest | step | lsn | end
        self.undos: collections.deque = collections.deque()
        self.overflow = False
        self.floor = {"lsn": lsn, "end": 1 << 62}.get(mode, 0)

    def fold(self, reader: Reader) -> None:
        records = reader.records(start_lsn=self.state.lsn + 1)
        keep = self.mode != "end"
        # The kept undo records are many young container objects that live a little while:
        # the cyclic GC would scan them again and again (a third of the fold's time) although
        # the fold makes no cycles. Off for the fold, back on after it (as it was).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._fold(records, keep)
        finally:
            if was_enabled:
                gc.enable()

    def _fold(self, records, keep: bool) -> None:
        while True:
            before = self.state.lsn
            # an islice, not a list: records die as soon as they are folded (a chunk of live
            # records would keep the cyclic GC busy)
            fold_records(self.state, itertools.islice(records, _CHUNK),
                         log=self.undos if keep and not self.overflow else None)
            if self.state.lsn == before:
                return
            if keep:
                self._trim()

    def _trim(self) -> None:
        st = self.state
        if self.mode == "latest":
            # lands on the newest checkpoint_begun among the committed ones: never below it
            self.floor = max(self.floor, max(st.committed_checkpoints.values(), default=0))
        elif self.mode == "step":
            # lands on the checkpoint_begun(S) that gets committed: never below the latest
            # begun(S) folded; before any, never below where the fold is now
            lsn = st.committed_checkpoints.get(self.step, st.pending_checkpoints.get(self.step))
            self.floor = max(self.floor, lsn if lsn is not None else st.lsn)
        undos = self.undos
        while undos and undos[0][0] <= self.floor:
            undos.popleft()
        if len(undos) > _MAX_UNDO_COMMITS:
            undos.clear()
            self.overflow = True

    def back_to(self, target: int) -> bool:
        """Revert the state to `target` with the kept undo records; False if they do not reach."""
        st = self.state
        if self.overflow or target < self.floor and st.lsn > target:
            return False
        while self.undos and self.undos[-1][0] > target:
            lsn, undo = self.undos.pop()
            if lsn != st.lsn:
                return False
            undo.revert(st)
        return st.lsn == target


def state_at(journal_path: str, at: str | int = "latest-checkpoint", *, step: int | None = None,
             reader: Reader | None = None) -> Point:
    """The state of the active history at `at` ("latest-checkpoint", "end", an LSN) or at the
    committed checkpoint of `step`.

    One pass: the newest usable cut is loaded (the others are only anchor-checked), the tail
    after it is folded to the end of the active history (which checks every commit and finds
    the checkpoint markers), and the commits after the restore point are taken back with
    their undo records. Only when the point is before that cut (or more than
    _MAX_UNDO_COMMITS commits follow it) is an older cut loaded and folded up to the point."""
    explicit = step is None and isinstance(at, int) and not isinstance(at, bool)
    if not (step is not None or explicit or at in ("latest-checkpoint", "end")):
        raise ValueError(f"at must be 'latest-checkpoint', 'end' or an LSN, not {at!r}")
    reader = reader or Reader(journal_path, "strict")
    skipped: list[Skipped] = []
    views = _anchored_cuts(reader, journal_path, skipped)
    newest = _load(views, None, skipped)
    state = _from(newest)
    mode = "step" if step is not None else "lsn" if explicit else "end" if at == "end" else "latest"
    back = _GoBack(state, mode, step, at if explicit else None)
    try:
        back.fold(reader)
        end, committed = state.lsn, dict(state.committed_checkpoints)
    except (OwnershipError, JournalCorrupt):
        # The fold to the end failed somewhere; maybe after the restore point, in a dead tail
        # that is never folded into the state (and must not stop a restore). Find the point by
        # its markers only, then fold up to it: an error there is the restore's.
        back.undos.clear()
        end, committed = checkpoint_markers(reader.records(start_lsn=newest.lsn + 1 if newest else 1),
                                            newest.state if newest is not None else None)
        state = None
    try:
        target, target_step = restore_point(at, step, end, committed)
    except NoSuchPoint as exc:
        raise RestoreError(f"{journal_path}: {exc}") from None
    if target == 0 and step is None and at == "latest-checkpoint":
        base, state = None, State()
    elif state is None or newest is not None and newest.lsn > target or not back.back_to(target):
        # fold again, from a cut at or before the point
        base = newest if newest is not None and newest.lsn <= target else _load(views, target, skipped)
        state = _from(base)
        reader.fold(stop_lsn=target, state=state)
    else:
        base = newest
    for v in views:
        if v.lsn > target and (base is None or v.path != base.path):
            skipped.append(Skipped(v.path, f"cut LSN {v.lsn} is after the restore point {target}"))
    if state.lsn != target:
        raise JournalCorrupt(f"{journal_path}: the active history ends at LSN {state.lsn}, before the "
                             f"restore point {target}", lsn=state.lsn + 1)
    return Point(target, target_step, state, base, end, skipped, committed)


def _from(cut: Cut | None) -> State:
    """A state to fold on: a copy of the cut's (with its anchor timeline), or an empty one."""
    if cut is None:
        return State()
    state = cut.state.copy()
    # a state read from a cut does not carry the anchor's timeline, and a resume or a new cut
    # at exactly this LSN (no tail folded on top) must name the right one
    state.timeline = cut.manifest.timeline
    return state


def check_anchor(reader: Reader, cut: Cut) -> None:
    problem = anchor_problem(reader, cut)
    if problem is not None:
        raise JournalMismatch(f"{cut.path}: {problem}")
