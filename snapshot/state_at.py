"""The state at one point of the active history: newest usable cut at or before it, plus
the journal tail replayed on top with the journal's own fold.

Both the compactor and `replay.restore` stand on this; correctness never
depends on a cut existing (without one the whole history is folded).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterator

from journal import CheckpointBegun, CheckpointCommitted, JournalCorrupt, Reader, State

from .cut import TMP_PREFIX, Cut, read_cut
from .errors import JournalMismatch, RestoreError

SNAPSHOTS_DIR = "snapshots"
_CUT_NAME = re.compile(r"^cut-(\d{8})-(\d{20})$")


def cut_dir_name(timeline: int, lsn: int) -> str:
    return f"cut-{timeline:08d}-{lsn:020d}"


def cut_dirs(journal_path: str) -> list[tuple[int, int, str]]:
    """(lsn, timeline, path) of every cut directory under `<journal>/snapshots`, newest LSN first.
    Temporary directories of an unfinished compaction are never listed."""
    root = os.path.join(journal_path, SNAPSHOTS_DIR)
    if not os.path.isdir(root):
        return []
    out = []
    for name in os.listdir(root):
        m = _CUT_NAME.match(name)
        if m and not name.startswith(TMP_PREFIX):
            out.append((int(m.group(2)), int(m.group(1)), os.path.join(root, name)))
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
    for lsn, timeline, path in cut_dirs(journal_path):
        try:
            cut = read_cut(path)
        except RestoreError as exc:
            skipped.append(Skipped(path, f"{type(exc).__name__}: {exc}"))
            continue
        problem = anchor_problem(reader, cut)
        if problem is not None:
            skipped.append(Skipped(path, f"JournalMismatch: {problem}"))
            continue
        yield cut


def _markers(reader: Reader, state: State) -> tuple[int, dict[int, int], dict[int, int]]:
    """Scan the tail after `state` for checkpoint markers; returns (end LSN, pending, committed)."""
    pending = dict(state.pending_checkpoints)
    committed = dict(state.committed_checkpoints)
    end = state.lsn
    for rec in reader.records(start_lsn=state.lsn + 1):
        end = rec.commit.lsn
        for ev in rec.commit.events:
            t = type(ev)
            if t is CheckpointBegun:
                pending[ev.step] = end
            elif t is CheckpointCommitted and ev.step in pending:
                committed[ev.step] = pending.pop(ev.step)
    return end, pending, committed


def state_at(journal_path: str, at: str | int = "latest-checkpoint", *, step: int | None = None,
             reader: Reader | None = None) -> Point:
    """The state of the active history at `at` ("latest-checkpoint", "end", an LSN) or at the
    committed checkpoint of `step`."""
    reader = reader or Reader(journal_path, "strict")
    skipped: list[Skipped] = []
    cuts = list(usable_cuts(reader, journal_path, skipped))
    newest = cuts[0] if cuts else None
    base_state = newest.state if newest is not None else State()
    end, pending, committed = _markers(reader, base_state)
    target_step = None
    if step is not None:
        if step not in committed:
            raise RestoreError(f"{journal_path}: no committed checkpoint for step {step} on the active "
                               f"history (committed steps: {sorted(committed) or 'none'})")
        target, target_step = committed[step], step
    elif at == "latest-checkpoint":
        if committed:
            target_step, target = max(committed.items(), key=lambda kv: kv[1])
        else:
            target = 0
    elif at == "end":
        target = end
    elif isinstance(at, int) and not isinstance(at, bool):
        if not 0 <= at <= end:
            raise RestoreError(f"{journal_path}: LSN {at} is outside the active history (0..{end})")
        target = at
        target_step = next((s for s, lsn in committed.items() if lsn == at), None)
    else:
        raise ValueError(f"at must be 'latest-checkpoint', 'end' or an LSN, not {at!r}")
    base = next((c for c in cuts if c.lsn <= target), None)
    for c in cuts:
        if c.lsn > target and c is not base:
            skipped.append(Skipped(c.path, f"cut LSN {c.lsn} is after the restore point {target}"))
    if target == 0 and step is None and at == "latest-checkpoint":
        return Point(0, None, State(), None, end, skipped, committed)
    state = base.state.copy() if base is not None else State()
    if base is not None:
        # the cut's anchor timeline: a state read from a cut does not carry it, and a resume
        # or a new cut at exactly this LSN (no tail folded on top) must name the right one
        state.timeline = base.manifest.timeline
    reader.fold(stop_lsn=target, state=state)
    if state.lsn != target:
        raise JournalCorrupt(f"{journal_path}: the active history ends at LSN {state.lsn}, before the "
                             f"restore point {target}", lsn=state.lsn + 1)
    return Point(target, target_step, state, base, end, skipped, committed)


def check_anchor(reader: Reader, cut: Cut) -> None:
    problem = anchor_problem(reader, cut)
    if problem is not None:
        raise JournalMismatch(f"{cut.path}: {problem}")
