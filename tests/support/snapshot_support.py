"""Helpers for the snapshot tests: random legal histories, reference folds, state comparison.

`drive(j, pick, n)` appends `n` random *legal* commits to a live `Journal`
(every event kind, transactions, checkpoint markers, run identities, loader states holding
tensors, tuples and bytes), choosing with a `Picker` so the same driver runs
under hypothesis (`HypothesisPicker`) and under a seeded `random.Random`
(`RandomPicker`). `reference_states(path)` folds the journal commit by commit
with the journal's own `apply` and keeps the state at every LSN.
`assert_same_state(got, want)` compares two states field by field (live
records, per-owner counts, terminal owners, next group id, checkpoints, the
loader state deeply, LSN, chain, timeline; the run identity and the rest through
`State.same_as`) and says which field differs.
"""

from __future__ import annotations

import os
import random

import torch

from journal import GroupRef, Journal, Owner, Reader, State
from journal.fold import apply
from journal.identity import digests

from tests.support.equality import deep_equal
from tests.support.journal_model import Model
from tests.support.loader_states import loader_state


class RandomPicker:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def bool(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    def sample(self, seq, k: int) -> list:
        return self.rng.sample(list(seq), k)


class HypothesisPicker:
    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def bool(self, p: float = 0.5) -> bool:
        return self.data.draw(self.st.floats(0, 1, exclude_max=True)) < p

    def sample(self, seq, k: int) -> list:
        pool = list(seq)
        out = []
        for _ in range(k):
            out.append(pool.pop(self.int(0, len(pool) - 1)))
        return out


TASKS = [None, "math", "code", "é-unicode"]


def _of(m: Model, *owners: Owner) -> list[int]:
    return sorted(g for g, o in m.owners.items() if o in owners)


def _picked_loader_state(pick, n: int) -> dict:
    """Small tensors inline, large ones (>= 512 bytes) become blobs in the journal."""
    epoch = pick.int(0, 2)
    return loader_state(n, epoch, blob_bytes=pick.choice([4, 700]) if pick.bool(0.6) else 0)


def _one(pick, m: Model, tx, allow_checkpoint: bool = True) -> tuple | None:
    """Append one random legal event to `tx` (a Transaction or the Journal) at model state `m`;
    return it in the model's vocabulary, or None when the drawn kind has no legal target
    (nothing appended). The dataset index is the number of groups taken so far, and
    checkpoint steps are begun in order 1, 2, 3, ..."""
    kinds = ["taken", "taken", "diverted", "admitted", "admitted", "finished", "finished", "trained",
             "discarded", "identity"]
    if allow_checkpoint:
        kinds += ["begin", "commit"]
    kind = pick.choice(kinds)
    if kind == "taken":
        refs, idx, next_gid = [], len(m.owners), m.next_gid
        for _ in range(pick.int(1, 3)):
            explicit = next_gid + pick.int(1, 4) if pick.bool(0.15) else None
            refs.append(GroupRef(idx=idx, task_name=pick.choice(TASKS),
                                 epoch=pick.choice([None, 0, 1]),
                                 fingerprint=pick.choice([None, b"\x00\xff" * 8]), group_id=explicit))
            idx += 1
            next_gid = (explicit if explicit is not None else next_gid) + 1
        ls = _picked_loader_state(pick, idx) if pick.bool(0.7) else None
        return ("taken", tx.taken(refs, loader_state=ls), ls)
    if kind == "diverted":
        cand = _of(m, Owner.RESERVED)
        if not cand:
            return None
        gs = pick.sample(cand, pick.int(1, min(2, len(cand))))
        tx.diverted(gs)
        return ("diverted", gs)
    if kind == "admitted":
        cand = _of(m, Owner.RESERVED, Owner.SPARE)
        if not cand:
            return None
        gs = pick.sample(cand, pick.int(1, min(3, len(cand))))
        replaces = pick.choice(sorted(m.owners)) if pick.bool(0.3) else None
        tx.admitted(gs, target_step=pick.int(0, 20), policy_version=pick.choice([None, 1, 2]),
                    replaces=replaces)
        return ("admitted", gs, replaces)
    if kind == "finished":
        cand = _of(m, Owner.ADMITTED)
        if not cand:
            return None
        gs = pick.sample(cand, pick.int(1, min(3, len(cand))))
        locs = [f"tq/{g}/ü" for g in gs] if pick.bool(0.7) else None
        tx.finished(gs, policy_version=pick.choice([None, 2, 3]), locators=locs)
        return ("finished", gs, locs)
    if kind == "trained":
        cand = _of(m, Owner.REPLAY)
        if not cand:
            return None
        gs = pick.sample(cand, pick.int(1, min(3, len(cand))))
        tx.trained(gs, step=pick.int(0, 20))
        return ("trained", gs)
    if kind == "discarded":
        cand = _of(m, Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE)
        if not cand:
            return None
        gs = pick.sample(cand, pick.int(1, min(2, len(cand))))
        tx.discarded(gs, reason=pick.choice(["rollout_failed", "filtered"]))
        return ("discarded", gs)
    if kind == "identity":
        identity = {"temperature": pick.int(0, 2), "tokenizer": pick.choice(TASKS)}
        tx.record_identity(identity)
        return ("identity", digests(identity))
    if kind == "begin":
        if m.pending:  # a writer has one checkpoint in flight at a time
            return None
        step = 1 + max([*m.pending, *m.committed], default=0)
        tx.begin_checkpoint(step=step)
        return ("begin", step)
    if not m.pending:
        return None
    step = pick.choice(list(m.pending))
    tx.commit_checkpoint(step=step)
    return ("commit", step)


def drive(j: Journal, pick, n: int, model: Model | None = None) -> Model:
    """Append `n` random legal commits (about one in six a multi-event transaction) to `j`, which
    is at state `model` (None: empty); return the model after them (it rejects an illegal one)."""
    m = model or Model()
    done = 0
    while done < n:
        if pick.bool(0.17):
            trial, events = m.copy(), []
            with j.transaction() as tx:
                for _ in range(pick.int(2, 3)):
                    # checkpoint markers stay out of transactions: a begun checkpoint's LSN is
                    # then the state it captures and nothing else happens at that LSN
                    ev = _one(pick, trial, tx, allow_checkpoint=False)
                    if ev is not None:
                        trial.event(ev, m.lsn + 1)
                        events.append(ev)
            if events:
                m = m.commit(events)
                done += 1
        else:
            ev = _one(pick, m, j)
            if ev is not None:
                m = m.commit([ev])
                done += 1
    return m


def lifecycle_checkpointed(j: Journal, steps: int, per_step: int = 20, first_idx: int = 0) -> None:
    """A deterministic trainer-like history: each step takes, admits, finishes, trains, drops
    one (a spare replaces it), leaves some groups in flight, and commits a checkpoint."""
    idx = first_idx
    for step in range(1, steps + 1):
        gids = j.taken([GroupRef(idx=idx + i, task_name="math", epoch=0) for i in range(per_step)],
                       loader_state={"pos": idx + per_step, "gen": torch.arange(600, dtype=torch.uint8)})
        idx += per_step
        half = per_step // 2
        j.admitted(gids[:half], target_step=step, policy_version=step)
        j.finished(gids[:half - 2], policy_version=step, locators=[f"tq/{g}" for g in gids[:half - 2]])
        j.trained(gids[:half - 4], step=step)
        j.diverted(gids[-2:])
        with j.transaction() as tx:
            tx.discarded([gids[half - 1]], reason="rollout_failed")
            tx.admitted([gids[-1]], target_step=step, replaces=gids[half - 1])
        j.begin_checkpoint(step=step)
        j.commit_checkpoint(step=step)


def reference_states(path: str) -> list[State]:
    """The fold of the active history at every LSN 0..end (index = LSN), from the journal's
    own reader and `apply` (live records are shared between the copies; nothing mutates them)."""
    state = State()
    out = [state.copy()]
    for rec in Reader(path, "strict").records():
        apply(state, rec.commit, chain=rec.chain, timeline=rec.timeline, blobs=rec.blobs)
        out.append(state.copy())
    return out


def committed_lsn(state: State) -> int:
    """The LSN restore lands on by default: the latest committed checkpoint's, or 0."""
    latest = state.latest_committed_checkpoint()
    return latest[1] if latest else 0


def assert_same_state(got: State, want: State, where: str = "") -> None:
    """Field-by-field equality of two fold states (the message names the first field that differs)."""
    assert (got.lsn, got.chain, got.timeline) == (want.lsn, want.chain, want.timeline), \
        f"{where}: anchor {(got.lsn, got.chain, got.timeline)} != {(want.lsn, want.chain, want.timeline)}"
    if got.live != want.live:
        diff = sorted(set(got.live) ^ set(want.live)) or \
            [g for g in want.live if got.live[g] != want.live[g]]
        raise AssertionError(f"{where}: live groups differ at LSN {want.lsn} (e.g. group {diff[:3]}: "
                             f"{[got.live.get(g) and got.live[g].as_dict() for g in diff[:1]]} vs "
                             f"{[want.live.get(g) and want.live[g].as_dict() for g in diff[:1]]})")
    assert got.owner_counts() == want.owner_counts(), f"{where}: counts differ"
    assert got.next_group_id == want.next_group_id, f"{where}: next group id differs"
    assert got.pending_checkpoints == want.pending_checkpoints, f"{where}: pending checkpoints differ"
    assert got.committed_checkpoints == want.committed_checkpoints, f"{where}: committed checkpoints differ"
    assert bytes(got.terminal.codes).rstrip(b"\0") == bytes(want.terminal.codes).rstrip(b"\0") and \
        got.terminal.sparse == want.terminal.sparse, f"{where}: terminal owners differ"
    gl = got.loader.decode() if got.loader is not None else None
    wl = want.loader.decode() if want.loader is not None else None
    assert deep_equal(gl, wl, key_order=True), f"{where}: loader state differs: {gl!r} vs {wl!r}"
    assert got.same_as(want), f"{where}: State.same_as disagrees"


def tree_names(path: str) -> list[str]:
    """Every entry under `path`, relative, sorted (for leftover checks)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            out.append(os.path.relpath(os.path.join(dirpath, name), path))
    return sorted(out)
