"""The fold: the one loop that turns commits into ownership state.

The writer runs it before a commit is written (an illegal transition raises and nothing is
written), and every reader (open, compaction, restore, inspection) runs the same code over what
is on disk, so the ownership rules are enforced twice by construction. `apply` is atomic:
either the whole commit is folded or the state is left exactly as it was and `OwnershipError`
is raised.

Each event is folded by its kind's step, made by the factory the table of kinds names
(`kinds.KIND_OF`, the rules of `rules.py`) at the first event of the kind a state folds, so
that a step holds the state's containers it changes; the state is `state.py`'s.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from .errors import JournalCorrupt
from .events import Commit
from .kinds import KIND_OF
from .state import State, Undo


def apply(state: State, commit: Commit, *, chain: int = 0, timeline: int = 0,
          blobs: Mapping[bytes, bytes] | None = None) -> Undo:
    """Fold `commit` into `state` atomically; returns the undo record.

    `chain` is the chain checksum after this commit (see `format.py`) and
    `timeline` the branch that wrote it (together: the state's anchor); `blobs`
    resolves the loader-state blobs a `taken` references. Raises
    `OwnershipError` (state unchanged) on an illegal transition and
    `JournalCorrupt` when the LSN does not follow or a blob is missing.
    """
    undo = Undo.__new__(Undo)
    undo.records = []
    fold_records(state, ((commit, chain, timeline, None, None, blobs),), undo)
    return undo


def fold_records(state: State, records, undo: Undo | None = None, log=None) -> State:
    """Fold `(commit, chain, timeline, segment, offset, blobs)` tuples (the `Record`s a reader
    yields) into `state`, each commit atomically as `apply` does (an error leaves the state
    after the last whole commit). One undo record is refilled by every commit (its list is
    cleared first); this is the loop every replay runs, once per commit, and the only fold
    loop: `apply`, `fold`, `Reader.fold`, `state_at`, verify and the inspection fold all
    hand their commits to it (a caller that acts between two commits hands it one `(rec,)`).

    With `log` (a list or deque), every commit gets its own undo record instead, appended as
    `(lsn, undo, commit)` once the commit is folded: a caller that may have to go back to an
    earlier LSN keeps the ones it needs and reverts them, newest first (and has the commits it
    took back without reading them again)."""
    undo = Undo(state) if undo is None else undo
    undo_records, counts = undo.records, state.counts
    record = undo_records.append
    log_append = log.append if log is not None else None
    kinds = KIND_OF
    # the dispatch, keyed by the event's type: each kind's step on this state, made at its first
    # event and kept on the state for the next fold (the writer folds each commit in its own
    # call). A step holds `state.live`, `.counts` and `.terminal`: made again once one of them
    # is replaced (a revert replaces counts; during a fold only the revert that ends it does).
    cached = state.fold_steps
    if (cached is None or cached[0] is not state.live or cached[1] is not counts
            or cached[2] is not state.terminal):
        cached = state.fold_steps = (state.live, counts, state.terminal, {})
    steps = cached[3]
    for commit, chain, timeline, _segment, _offset, blobs in records:
        if log is not None:
            undo = Undo.__new__(Undo)
            undo_records = undo.records = []
            record = undo_records.append
        lsn = commit.lsn
        if lsn != state.lsn + 1:
            raise JournalCorrupt(f"commit LSN {lsn} does not follow LSN {state.lsn}", lsn=lsn)
        undo.scalars = (state.lsn, state.chain, state.timeline, state.next_group_id, state.loader,
                        counts[:], state.dataset_size, state.row_sample, state.identity)
        undo.checkpoints = None
        undo_records.clear()
        try:
            for event in commit.events:
                step = steps.get(type(event))
                if step is None:
                    kind = kinds[type(event)]
                    step = steps[kind.struct] = kind.fold(kind, state)
                step(state, event, lsn, record, undo, blobs)
        except BaseException:
            undo.revert(state)
            raise
        state.lsn = lsn
        state.chain = chain
        state.timeline = timeline
        if log is not None:
            log_append((lsn, undo, commit))
    return state


def fold(commits: Iterable[Commit], state: State | None = None) -> State:
    """Fold commits (each `lsn` following the last) into a new or given state.

    For commits outside a journal (tests, models): chain and timeline 0, each commit's blobs
    its own; readers fold their `Record`s with `fold_records`."""
    state = State() if state is None else state
    return fold_records(state, ((c, 0, 0, None, None, {b.digest: b.data for b in c.blobs})
                                for c in commits))
