"""The state at one point of the active history: newest usable cut at or before it, plus
the journal tail replayed on top with the journal's own fold.

Both the compactor and `replay.restore` stand on this; correctness never
depends on a cut existing (without one the whole history is folded).
"""

from __future__ import annotations

import collections
import gc
import itertools
from dataclasses import dataclass, field

from journal import Commit, JournalCorrupt, OwnershipError, Reader, State
from journal.history import NoSuchPoint, checkpoint_markers, restore_point
from journal.fold import fold_records

from .catalog import Skipped, anchored_cuts, newest_readable
from .cut import Cut
from .errors import RestoreError


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
    # the commits after `lsn` to the end of the active history (the dead tail a resume
    # abandons), in LSN order, when the fold that found the point kept them; None: read them
    dead_tail: list[Commit] | None = None


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

    def back_to(self, target: int) -> list[Commit] | None:
        """Revert the state to `target` with the kept undo records: the commits taken back, in
        LSN order; None if the undo records do not reach."""
        st = self.state
        if self.overflow or target < self.floor and st.lsn > target:
            return None
        taken_back = []
        while self.undos and self.undos[-1][0] > target:
            lsn, undo, commit = self.undos.pop()
            if lsn != st.lsn:
                return None
            undo.revert(st)
            taken_back.append(commit)
        taken_back.reverse()
        return taken_back if st.lsn == target else None


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
    views = anchored_cuts(reader, journal_path, skipped)
    newest = newest_readable(views, None, skipped)
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
    dead_tail = None
    if target == 0 and step is None and at == "latest-checkpoint":
        base, state = None, State()
    elif state is None or newest is not None and newest.lsn > target or (
            dead_tail := back.back_to(target)) is None:
        # fold again, from a cut at or before the point
        base = (newest if newest is not None and newest.lsn <= target
                else newest_readable(views, target, skipped))
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
    return Point(target, target_step, state, base, end, skipped, committed, dead_tail)


def _from(cut: Cut | None) -> State:
    """A state to fold on: a copy of the cut's (`read_cut` gives it the anchor's timeline), or
    an empty one."""
    return cut.state.copy() if cut is not None else State()
