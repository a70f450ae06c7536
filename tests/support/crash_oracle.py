"""What a workload was told, and the checks every crash image / error run must pass.

Shared by `test_crash_states.py` and `test_io_error_sweep.py`. A `Run` drives a
real `Journal` through `FaultFS` and records, independently of the library:

* `expected[(timeline, lsn)]`: the events the workload committed there (the
  journal's own event structs, loader states kept as the objects given);
* `acks`: (number of recorded ops when the call returned, timeline, LSN) of
  every acknowledged commit, and `branches`: acknowledged resumes.

`check_journal(path, run, point)` then verifies a directory (a crash image or
the real one after an injected error): the strict reader opens it, every
commit acknowledged by `point` is on the active history (or on a dead tail an
acknowledged resume made dead) with exactly the events written, nothing else
is there, `restore` equals an independent fold (`journal_model.Model`) of
those events up to the latest committed checkpoint's `checkpoint_begun` LSN,
every cut reads, and the journal reopens (repairing a torn tail) and appends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgspec

from journal import (Admitted, CheckpointBegun, CheckpointCommitted, Commit, Discarded, Diverted, Finished,
                     GroupRef, Journal, JournalCorrupt, Reader, RolloutFailed, RolloutProgress, RolloutRef,
                     RolloutSealed, StaleAttempt, Taken, TakenGroup, Trained)
from journal.loader_state import unpack
from tests.support.equality import deep_equal
from tests.support.journal_model import Model, events_of
from tests.support.recovery_model import Expected, expected_recovery, reissued_order
from tests.support.loader_states import loader_state
from replay import restore
from replay.restore_rules import ABANDONED
from snapshot import compact, read_cut
from journal.layout import SNAPSHOTS_DIR

try:  # faultfs is another engineer's; only its FaultFS is needed here
    from tests.support.faultfs import FaultFS
except ImportError:  # pragma: no cover
    FaultFS = None


def model_events(events: list, loaders: list) -> list[tuple]:
    """Journal event structs in the model's vocabulary, each `taken` carrying its loader state
    object (in order) instead of the packed struct `events_of` gives."""
    li = iter(loaders)
    return [(ev[0], ev[1], next(li)) if ev[0] == "taken" else ev
            for ev in events_of(Commit(0, events))]


@dataclass
class Run:
    """A workload's record of what it did. `fs` is the FaultFS every call goes through."""

    root: str
    fs: object = None
    expected: dict = field(default_factory=dict)   # (timeline, lsn) -> (events, loader states)
    acks: list = field(default_factory=list)       # (op index, timeline, lsn)
    branches: list = field(default_factory=list)   # (op index, timeline, branch lsn)
    segment_bytes: int = 4096
    ack_on_flush: bool = False   # sync="batch"/"none": a commit is acknowledged by flush()
    unflushed: list = field(default_factory=list)

    def __post_init__(self):
        if self.fs is None:
            self.fs = FaultFS(root=self.root)

    def mark(self) -> int:
        return len(self.fs.ops)

    def open(self, **kw) -> Journal:
        kw.setdefault("segment_bytes", self.segment_bytes)
        return Journal.open(self.root, fs=self.fs, **kw)

    # -- calls that record what they commit ------------------------------------------------

    def _intend(self, j: Journal, events: list, loaders: list) -> tuple[int, int]:
        """Record what the next commit will hold *before* making it: a commit whose write
        reached the disk before its fsync failed (JournalFailed) may be there after a reopen,
        in doubt but never acknowledged."""
        key = (j.timeline, j.lsn + 1)
        self.expected[key] = (events, loaders)
        return key

    def _acked(self, j: Journal, key: tuple[int, int]) -> None:
        assert (j.timeline, j.lsn) == key, f"commit landed at {(j.timeline, j.lsn)}, expected {key}"
        if self.ack_on_flush:
            self.unflushed.append(key)
        else:
            self.acks.append((self.mark(), *key))

    def _done(self, j: Journal, events: list, loaders: list) -> None:
        self.expected[(j.timeline, j.lsn)] = (events, loaders)
        self._acked(j, (j.timeline, j.lsn))

    def flush(self, j: Journal) -> None:
        j.flush()
        self.acks += [(self.mark(), t, lsn) for t, lsn in self.unflushed]
        self.unflushed = []

    @staticmethod
    def _refs(idxs, epoch=0):
        return [GroupRef(idx=i, task_name="math", epoch=epoch, fingerprint=b"fp%d" % i) for i in idxs]

    def taken(self, j: Journal, idxs: list[int], loader_state=None, *, epoch: int = 0) -> list[int]:
        refs = self._refs(idxs, epoch)
        nxt = j.state_copy().next_group_id
        want = list(range(nxt, nxt + len(refs)))
        ev = Taken([TakenGroup(g, r.idx, r.task_name, r.epoch, r.fingerprint) for g, r in zip(want, refs)])
        key = self._intend(j, [ev], [loader_state])
        gids = j.taken(refs, loader_state=loader_state)
        assert gids == want, f"allocated {gids}, expected {want}"
        self._acked(j, key)
        return gids

    def call(self, j: Journal, kind: str, *args, **kw) -> int:
        """One single-event commit; `kind` is a Journal method name."""
        key = self._intend(j, [_event(kind, args, kw)], [])
        lsn = getattr(j, kind)(*args, **kw)
        assert lsn == key[1]
        self._acked(j, key)
        return lsn

    def transaction(self, j: Journal, calls: list[tuple]) -> int:
        """`calls`: (method name, args, kwargs); `taken` entries take (idxs, loader_state)."""
        events, loaders = [], []
        nxt = j.state_copy().next_group_id
        for kind, args, kw in calls:
            if kind == "taken":
                idxs, ls = args
                refs = self._refs(idxs)
                events.append(Taken([TakenGroup(nxt + i, r.idx, r.task_name, r.epoch, r.fingerprint)
                                     for i, r in enumerate(refs)]))
                nxt += len(refs)
                loaders.append(ls)
            else:
                events.append(_event(kind, args, kw))
        key = self._intend(j, events, loaders)
        with j.transaction() as tx:
            for (kind, args, kw), ev in zip(calls, events):
                if kind == "taken":
                    gids = tx.taken(self._refs(args[0]), loader_state=args[1])
                    assert gids == [g.group_id for g in ev.groups]
                else:
                    getattr(tx, kind)(*args, **kw)
        self._acked(j, key)
        return j.lsn

    def resumed(self, j: Journal, rs, reconcile: list | None = None, loaders: list = ()) -> None:
        """`j` was just opened with resume=`rs` (a restore at `rs.lsn`); `reconcile` is the events
        of its first commit (re-marking the restored checkpoint, the rules' events) when there
        is one, `loaders` the loader states of its `taken` events. The writer adds the
        restore's record (`rs.restored`) to that commit, or writes it alone when it branched."""
        branch_lsn = rs.lsn
        first = list(reconcile or []) + ([rs.restored] if j.lsn == branch_lsn + 1 else [])
        self.branches.append((self.mark(), j.timeline, branch_lsn, bool(first)))
        if first:
            assert j.lsn == branch_lsn + 1
            self._done(j, first, list(loaders))
        else:
            assert j.lsn == branch_lsn


def _event(kind: str, args: tuple, kw: dict):
    if kind == "diverted":
        return Diverted(list(args[0]))
    if kind == "admitted":
        return Admitted(list(args[0]), kw["target_step"], kw.get("policy_version"), kw.get("replaces"),
                        kw.get("rollouts"))
    if kind == "rollout_sealed":
        return RolloutSealed(list(args[0]), kw.get("policy_version"))
    if kind == "rollout_failed":
        return RolloutFailed(list(args[0]), kw["reason"])
    if kind == "rollout_progress":
        return RolloutProgress(args[0], kw["tokens"], kw.get("turn"), kw.get("policy_version"))
    if kind == "finished":
        loc = kw.get("locators")
        return Finished(list(args[0]), kw.get("policy_version"), list(loc) if loc is not None else None)
    if kind == "trained":
        return Trained(list(args[0]), kw["step"])
    if kind == "discarded":
        return Discarded(list(args[0]), kw["reason"])
    if kind == "begin_checkpoint":
        return CheckpointBegun(kw["step"])
    if kind == "commit_checkpoint":
        return CheckpointCommitted(kw["step"])
    raise ValueError(kind)


def loader(i: int, big: bool = True) -> dict:
    """The workloads' loader state at take `i`: a new epoch every 4 takes; `big` adds a 640-byte
    generator (a blob, stored once per segment)."""
    return loader_state(i, i // 4, blob_bytes=640 if big else 0)


# -- workloads (recorded runs the crash states and the error sweep start from) ------------


def w_rotation(run: Run) -> None:
    """Appends across several segment rotations (4 KiB segments), a checkpoint in the middle."""
    j = run.open()
    for i in range(9):
        g = run.taken(j, [2 * i, 2 * i + 1], loader(i))
        run.call(j, "admitted", g, target_step=i, policy_version=i)
        run.call(j, "finished", g[:1], policy_version=i, locators=[f"dp/{g[0]}"])
        if i == 5:
            run.call(j, "begin_checkpoint", step=5)
            run.call(j, "commit_checkpoint", step=5)
        run.call(j, "trained", g[:1], step=i)
    j.close()


def w_transaction(run: Run) -> None:
    """Multi-event transactions: a spare replacing a failed group, a checkpoint inside one."""
    j = run.open()
    g = run.taken(j, [0, 1, 2, 3], loader(0))
    run.call(j, "admitted", g[:2], target_step=1, policy_version=0)
    run.transaction(j, [("diverted", ([g[2]],), {}), ("discarded", ([g[0]],), {"reason": "rollout_failed"}),
                        ("admitted", ([g[2]],), {"target_step": 1, "policy_version": 0, "replaces": g[0]})])
    run.transaction(j, [("taken", ([4, 5], loader(1)), {}), ("finished", ([g[1], g[2]],),
                                                             {"policy_version": 0, "locators": ["a", "b"]}),
                        ("begin_checkpoint", (), {"step": 1})])
    run.call(j, "commit_checkpoint", step=1)
    run.transaction(j, [("trained", ([g[1]],), {"step": 2}), ("diverted", ([g[3]],), {}),
                        ("taken", ([6], loader(2)), {}), ("begin_checkpoint", (), {"step": 2}),
                        ("commit_checkpoint", (), {"step": 2})])
    run.transaction(j, [("trained", ([g[2]],), {"step": 3}), ("begin_checkpoint", (), {"step": 3})])
    j.close()


def w_checkpoint(run: Run) -> None:
    """Checkpoint begin/commit pairs, one begun and never committed (its writer stops; the
    next one continues the history as it is), one committed late."""
    j = run.open()
    for s in range(1, 5):
        g = run.taken(j, [s * 10, s * 10 + 1], loader(s, big=False))
        run.call(j, "admitted", g, target_step=s)
        run.call(j, "begin_checkpoint", step=s)
        run.call(j, "finished", g, locators=["x", "y"])
        if s != 3:
            run.call(j, "commit_checkpoint", step=s)
        run.call(j, "trained", g[:1], step=s)
        if s == 3:  # a writer begins no checkpoint while one of its own is pending
            j.close()
            j = run.open()
    run.call(j, "begin_checkpoint", step=9)
    j.close()


def finished_groups_with_checkpoint(run: Run, j) -> list[int]:
    """14 groups taken and admitted, the odd ones finished, checkpoint 1 committed after the
    tenth: the history the compaction workloads start from. Returns the finished groups."""
    done = []
    for i in range(14):
        g = run.taken(j, [i], loader(i))
        run.call(j, "admitted", g, target_step=i)
        if i % 2:
            run.call(j, "finished", g, locators=[f"r{i}"])
            done += g
        if i == 9:
            run.call(j, "begin_checkpoint", step=1)
            run.call(j, "commit_checkpoint", step=1)
    return done


def _compaction(run: Run, mode: str) -> None:
    j = run.open()
    done = finished_groups_with_checkpoint(run, j)
    compact(run.root, journal=j, keep_cuts=1, retention=mode, fs=run.fs)  # retires segments
    run.call(j, "trained", done[:3], step=2)
    for i in range(14, 22):
        g = run.taken(j, [i], loader(i))
        run.call(j, "admitted", g, target_step=3)
    run.call(j, "begin_checkpoint", step=2)
    run.call(j, "commit_checkpoint", step=2)
    run.call(j, "trained", done[3:5], step=3)
    j.close()
    compact(run.root, keep_cuts=1, retention=mode, fs=run.fs)  # replaces the cut, retires more


def w_compact_archive(run: Run) -> None:
    """Two compactions with retention="archive" (cuts replaced, segments archived to .zst)."""
    _compaction(run, "archive")


def w_compact_delete(run: Run) -> None:
    """Two compactions with retention="delete" (the head of the history is removed)."""
    _compaction(run, "delete")


def w_resume(run: Run) -> None:
    """A crashed run (checkpoint 2 committed, a dead tail after it) resumed onto timeline 2."""
    j = run.open()
    g = run.taken(j, [0, 1, 2], loader(0))
    run.call(j, "admitted", g, target_step=1)
    run.call(j, "begin_checkpoint", step=1)
    run.call(j, "commit_checkpoint", step=1)
    run.call(j, "finished", g[:2], policy_version=1, locators=["a", "b"])
    run.call(j, "trained", g[:1], step=2)
    run.call(j, "begin_checkpoint", step=2)
    g2 = run.taken(j, [3, 4], loader(1))        # the dead tail: after checkpoint 2's begin
    run.call(j, "commit_checkpoint", step=2)
    run.call(j, "admitted", g2, target_step=3)
    run.call(j, "trained", g[1:2], step=3)
    j.close()
    rs = restore(run.root)
    j = run.open(resume=rs)
    run.resumed(j, rs, [CheckpointCommitted(2)])
    g3 = run.taken(j, [3, 4], loader(2))
    assert min(g3) > max(g2), "a group id of the dead tail was reused"
    run.call(j, "admitted", g3, target_step=3)
    run.call(j, "begin_checkpoint", step=3)
    run.call(j, "commit_checkpoint", step=3)
    j.close()


def w_resume_retired(run: Run) -> None:
    """A resume onto a new branch of a journal whose head was deleted by retention, then a
    compaction of the new branch (which deletes the rest of the old timeline it covers)."""
    _compaction(run, "delete")
    rs = restore(run.root)
    j = run.open(resume=rs)
    run.resumed(j, rs, [CheckpointCommitted(rs.step)])
    g = run.taken(j, [900, 901], loader(90))
    run.call(j, "admitted", g, target_step=5)
    run.call(j, "begin_checkpoint", step=5)
    run.call(j, "commit_checkpoint", step=5)
    j.close()
    compact(run.root, keep_cuts=1, retention="delete", fs=run.fs)


def _unsynced(run: Run, sync: str) -> None:
    run.ack_on_flush = True
    j = run.open(sync=sync, sync_interval=0.2)  # the flushes here come long before a timed one
    for i in range(16):
        g = run.taken(j, [i], loader(i))
        run.call(j, "admitted", g, target_step=i)
        run.call(j, "finished", g, locators=[f"r{i}"])
        if i in (2, 5, 10, 13):  # flushes at irregular points: one falls after a rotation
            run.call(j, "begin_checkpoint", step=i)
            run.call(j, "commit_checkpoint", step=i)
            run.flush(j)
    run.flush(j)
    j.close()


def w_batch(run: Run) -> None:
    """sync="batch": several frames per fsync window, acknowledged by flush() (the states
    where a later frame persisted without an earlier one are the README's limitation)."""
    _unsynced(run, "batch")


def w_sync_none(run: Run) -> None:
    """sync="none" with explicit flush() calls, across segment rotations."""
    _unsynced(run, "none")


def rollout_groups(run: Run, j, rounds: range, *, checkpoint_at: int | None = None) -> list[int]:
    """Groups admitted with rollouts=3, per round: a seal, two failures in one commit, a prefix
    of the second group's fresh rollout, a transaction sealing the first group's last
    rollouts (one a retry), finishing it and recording a prefix of the second group's retry,
    a newer prefix of the fresh rollout by the next round's weights, a train; the second
    group keeps a sealed, a failed-and-unsealed and a fresh (index 0) rollout, both with a
    prefix. A committed checkpoint after round `checkpoint_at`. Returns the second groups."""
    kept = []
    for i in rounds:
        a, b = run.taken(j, [2 * i, 2 * i + 1], loader(i))
        run.call(j, "admitted", [a, b], target_step=i, policy_version=i, rollouts=3)
        run.call(j, "rollout_sealed", [RolloutRef(a, 0, 0, f"dp/{a}/0"), RolloutRef(b, 1, 0, f"dp/{b}/1")],
                 policy_version=i)
        run.call(j, "rollout_failed", [RolloutRef(a, 1, 0), RolloutRef(b, 2, 0)], reason="timeout")
        run.call(j, "rollout_progress", RolloutRef(b, 0, 0, f"dp/{b}/0/p1"), tokens=16 * i + 1, policy_version=i)
        run.transaction(j, [("rollout_sealed", ([RolloutRef(a, 2, 0, f"dp/{a}/2"),
                                                 RolloutRef(a, 1, 1, f"dp/{a}/1")],), {"policy_version": i}),
                            ("finished", ([a],), {"policy_version": i}),
                            ("rollout_progress", (RolloutRef(b, 2, 1, f"dp/{b}/2/p1"),),
                             {"tokens": 7, "turn": 1, "policy_version": i})])
        if i == checkpoint_at:
            run.call(j, "begin_checkpoint", step=i)
            run.call(j, "commit_checkpoint", step=i)
        run.call(j, "rollout_progress", RolloutRef(b, 0, 0, f"dp/{b}/0/p2"), tokens=16 * i + 9,
                 policy_version=i + 1)
        run.call(j, "trained", [a], step=i)
        kept.append(b)
    return kept


def resume_first_commit(run: Run, rs) -> list:
    """The first commit a resume from `rs` must write, from the model of the history on disk:
    the restored checkpoint marked committed again, every unsealed rollout of a group
    ADMITTED at it failed (its attempt raised) and the prefixes it held there recorded again
    under the raised attempt. No data plane: nothing salvaged or demoted."""
    reader = Reader(run.root)
    end = max(rec.commit.lsn for rec in reader.records())
    _, at, step = model_at(run, history_keys(reader, end))
    if (rs.lsn, rs.step) != (at.lsn, step):
        raise Violation(f"restore at LSN {rs.lsn} step {rs.step}, the model at {at.lsn} step {step}")
    used = attempts_on_disk(run.root)
    return ([CheckpointCommitted(step)] + [RolloutFailed([RolloutRef(*ref) for ref in refs], ABANDONED)
                                           for refs in at.fence_rounds(used)]
            + at.carried_progress(used, step))


def attempts_on_disk(path: str) -> dict[tuple[int, int], int]:
    """(gid, index) -> the highest attempt any timeline on disk dispatched it in: a seal or a
    prefix names its attempt, a failure of attempt a is followed by a dispatch of a+1."""
    reader, used = Reader(path), {}
    for t in reader.timelines:
        for rec in reader.timeline_records(t):
            for ev in rec.commit.events:
                if type(ev) is RolloutProgress:
                    key = (ev.ref.group_id, ev.ref.index)
                    used[key] = max(used.get(key, 0), ev.ref.attempt)
                elif type(ev) in (RolloutSealed, RolloutFailed):
                    for r in ev.rollouts:
                        key = (r.group_id, r.index)
                        used[key] = max(used.get(key, 0), r.attempt + (type(ev) is RolloutFailed))
    return used


def admitted_on_disk(path: str) -> set[int]:
    """The groups any timeline on disk admitted."""
    reader = Reader(path)
    return {gid for t in reader.timelines for rec in reader.timeline_records(t)
            for ev in rec.commit.events if type(ev) is Admitted for gid in ev.groups}


def w_rollouts(run: Run) -> None:
    """Rollouts sealed, failed and with prefixes (alone and in transactions; the checkpoint's
    by its weights and by newer ones, and on the dead tail) across segment rotations, a
    compaction while the journal is open (the cut holds a rollout table of partly sealed
    groups), seals after the restored checkpoint's begin (a dead tail), a resume (its first
    commit raises the attempts of the unsealed rollouts; a late seal of the old attempt is
    fenced), the pending rollouts sealed with their new attempt, and a compaction of the new
    branch (a cut holding the raised attempts)."""
    j = run.open()
    kept = rollout_groups(run, j, range(4), checkpoint_at=2)
    compact(run.root, journal=j, keep_cuts=1, retention="archive", fs=run.fs)
    rollout_groups(run, j, range(4, 6))
    run.call(j, "rollout_progress", RolloutRef(kept[3], 0, 0, f"dp/{kept[3]}/0/p3"), tokens=99, policy_version=7)
    run.call(j, "begin_checkpoint", step=6)  # what follows is the dead tail of the restore at 6
    run.call(j, "rollout_sealed", [RolloutRef(kept[0], 0, 0, f"dp/{kept[0]}/0")], policy_version=6)
    run.call(j, "commit_checkpoint", step=6)
    run.call(j, "rollout_failed", [RolloutRef(kept[1], 0, 0)], reason="timeout")
    run.call(j, "rollout_progress", RolloutRef(kept[2], 0, 0, f"dp/{kept[2]}/0/p3"), tokens=98, policy_version=6)
    run.call(j, "rollout_progress", RolloutRef(kept[2], 2, 1, f"dp/{kept[2]}/2/p2"), tokens=97, policy_version=7)
    j.close()
    rs = restore(run.root)
    first = resume_first_commit(run, rs)
    j = run.open(resume=rs)
    run.resumed(j, rs, first)
    pending = [(g.group_id, r.index, r.attempt) for g in rs.admitted for r in g.pending]
    gid, index, attempt = pending[0]
    try:
        j.rollout_sealed([RolloutRef(gid, index, attempt - 1, "dp/late")])
    except StaleAttempt:
        pass
    else:
        raise Violation(f"a late seal of attempt {attempt - 1} of group {gid} rollout {index} was accepted")
    run.call(j, "rollout_sealed", [RolloutRef(g, i, a, f"dp/{g}/{i}/{a}") for g, i, a in pending[:3]],
             policy_version=7)
    g, i, a = pending[3]
    run.call(j, "rollout_progress", RolloutRef(g, i, a, f"dp/{g}/{i}/{a}/p1"), tokens=5, policy_version=7)
    run.call(j, "begin_checkpoint", step=7)
    run.call(j, "commit_checkpoint", step=7)
    j.close()
    compact(run.root, keep_cuts=1, retention="archive", fs=run.fs)


def dead_tail_of_takes(run: Run) -> list[int]:
    """A crashed run whose dead tail holds takes (their loader states with a blob), admissions,
    seals by the checkpoint's weights and newer ones (of a group admitted at the checkpoint too:
    salvaged and fenced), a finish, a training, a drop and a diversion; a group finished before
    the checkpoint without a locator (demoted); a group waiting at the checkpoint that the tail
    admits (reissued), one of its rollouts sealed without a policy version (its admission's),
    another with a prefix of newer weights. Returns the ids of the tail's takes."""
    j = run.open()
    a, b, w = run.taken(j, [0, 1, 7], loader(0))
    run.call(j, "admitted", [a], target_step=1, policy_version=0, rollouts=3)
    run.call(j, "admitted", [b], target_step=1, policy_version=0)
    run.call(j, "finished", [b], policy_version=0)  # no locator: the restore regenerates it
    run.call(j, "rollout_sealed", [RolloutRef(a, 0, 0, f"dp/{a}/0")], policy_version=0)
    run.call(j, "begin_checkpoint", step=1)
    run.call(j, "commit_checkpoint", step=1)
    run.call(j, "admitted", [w], target_step=2, policy_version=1, rollouts=3)  # the dead tail
    run.call(j, "rollout_sealed", [RolloutRef(w, 0, 0, f"dp/{w}/0")])
    run.call(j, "rollout_progress", RolloutRef(w, 1, 0, f"dp/{w}/1/p1"), tokens=12, policy_version=2)
    c, d, e = run.taken(j, [2, 3, 4], loader(1))
    run.call(j, "admitted", [c, d], target_step=2, policy_version=1, rollouts=2)
    run.transaction(j, [("rollout_sealed", ([RolloutRef(c, 0, 0, f"dp/{c}/0"), RolloutRef(c, 1, 0, f"dp/{c}/1"),
                                              RolloutRef(d, 0, 0, f"dp/{d}/0")],), {"policy_version": 1}),
                        ("finished", ([c],), {"policy_version": 1}),
                        ("rollout_sealed", ([RolloutRef(a, 1, 0, f"dp/{a}/1")],), {"policy_version": 1}),
                        ("rollout_sealed", ([RolloutRef(a, 2, 0, f"dp/{a}/2")],), {"policy_version": 2})])
    run.call(j, "trained", [c], step=2)
    run.call(j, "rollout_sealed", [RolloutRef(d, 1, 0, f"dp/{d}/1")], policy_version=2)
    run.call(j, "diverted", [e])
    (f,) = run.taken(j, [5], loader(2))
    run.call(j, "admitted", [f], target_step=3, policy_version=2)
    run.call(j, "finished", [f], policy_version=1, locators=[f"dp/{f}"])
    run.call(j, "discarded", [f], reason="stale")
    j.close()
    return [c, d, e, f]


def adopting_first_commit(run: Run, rs) -> tuple[list, list]:
    """The first commit (events, loader states of its `taken` events: the demotions' have none,
    the adoption's is last) a resume from `rs`, the salvage restore of the workload's latest
    checkpoint, writes by the rules (`recovery_model`)."""
    reader = Reader(run.root)
    keys = history_keys(reader, max(rec.commit.lsn for rec in reader.records()))
    _, at, step = model_at(run, keys)
    want = expected_salvage(run.root, run, keys, at, step, rs)
    takes = sum(type(ev) is Taken for ev in want.first_commit)
    loaders = [None] * (takes - 1) + [want.loader] if want.adopted_from else [None] * takes
    return [CheckpointCommitted(step)] + want.first_commit, loaders


def w_adopt(run: Run) -> None:
    """`dead_tail_of_takes`, then a resume with salvage that adopts the takes: its first commit
    (the loader state's blob in the new branch's segment) is the rules'; the adopted groups go
    on, a checkpoint, a compaction of the new branch."""
    tail = dead_tail_of_takes(run)
    rs = restore(run.root, salvage=True, data_plane=WrittenRows(run))
    assert [g.adopted_from for g in rs.adopted] == tail and len(rs.demoted) == 1
    first, loaders = adopting_first_commit(run, rs)
    j = run.open(resume=rs)
    run.resumed(j, rs, first, loaders)
    for g in rs.admitted:
        gid = g.group_id
        if g.rollouts is None:
            run.call(j, "finished", [gid], locators=[f"dp/{gid}"])
            continue
        run.call(j, "rollout_sealed", [RolloutRef(gid, r.index, r.attempt, f"dp/{gid}/{r.index}/{r.attempt}")
                                       for r in g.pending], policy_version=1)
        run.call(j, "finished", [gid])
    run.call(j, "trained", [g.group_id for g in rs.replay + rs.admitted], step=2)
    run.taken(j, [6], loader(3))
    run.call(j, "begin_checkpoint", step=2)
    run.call(j, "commit_checkpoint", step=2)
    j.close()
    compact(run.root, keep_cuts=1, retention="archive", fs=run.fs)


WORKLOADS = {
    "rotation": w_rotation,
    "transaction": w_transaction,
    "checkpoint": w_checkpoint,
    "compact-archive": w_compact_archive,
    "compact-delete": w_compact_delete,
    "resume": w_resume,
    "resume-retired": w_resume_retired,
    "batch": w_batch,
    "sync-none": w_sync_none,
    "rollouts": w_rollouts,
    "adopt": w_adopt,
}


# -- the checks --------------------------------------------------------------------------


class Violation(AssertionError):
    pass


def _same_events(rec, events: list, loaders: list) -> bool:
    got = rec.commit.events
    if len(got) != len(events):
        return False
    li = iter(loaders)
    for g, e in zip(got, events):
        if type(g) is not type(e):
            return False
        if type(g) is Taken:
            if list(g.groups) != list(e.groups):
                return False
            want = next(li)
            have = unpack(g.loader_state, rec.blobs) if g.loader_state is not None else None
            if not deep_equal(have, want, key_order=True):
                return False
        elif g != e:
            return False
    return True


def history_keys(reader: Reader, end: int) -> list[tuple[int, int]]:
    """(timeline, lsn) of LSNs 1..end of the active history, from the lineage's branch points."""
    lineage = reader.lineage()
    keys = []
    for lsn in range(1, end + 1):
        tl = lineage[0].timeline
        for t in lineage[1:]:
            if t.branch_lsn < lsn:
                tl = t.timeline
        keys.append((tl, lsn))
    return keys


def model_at(run: Run, keys: list[tuple[int, int]]) -> tuple[Model, Model, int | None]:
    """(model at the end, model at the latest committed checkpoint, its step) of a history."""
    m = Model()
    states = [m]
    for key in keys:
        if key not in run.expected:
            raise Violation(f"commit {key} (timeline, LSN) is on the history but was never written")
        events, loaders = run.expected[key]
        m = m.commit(model_events(events, loaders))
        states.append(m)
    if not m.committed:
        return m, Model(), None
    step, lsn = max(m.committed.items(), key=lambda kv: kv[1])
    return m, states[lsn], step


def check_restore(path: str, model: Model, step: int | None) -> None:
    rs = restore(path)
    if rs.lsn != model.lsn:
        raise Violation(f"restore at LSN {rs.lsn}, the model's latest committed checkpoint is at {model.lsn}")
    if rs.step != step:
        raise Violation(f"restore says step {rs.step}, the model {step}")
    got = {g.group_id: g.owner for g in rs.groups}
    want = model.recovered()
    waiting = reissued_order(want, admitted_on_disk(path))
    fresh = sorted(set(got) - set(want))
    if len(fresh) != len(waiting) or (fresh and fresh[0] <= _max_gid_on_disk(path)):
        raise Violation(f"restore gave fresh ids {fresh} to the waiting groups a later history admitted "
                        f"{waiting}: not one fresh id each, above every id on disk")
    want = {gid: o for gid, o in want.items() if gid not in waiting} | {
        new: want[old] for new, old in zip(fresh, waiting)}
    if got != want:
        raise Violation(f"restored owners {sorted(got.items())} != model {sorted(want.items())}")
    counts = {k: v for k, v in rs.counts.items()}
    want_counts = {o.name: n for o, n in model.counts().items()}
    if counts != want_counts:
        raise Violation(f"restored counts {counts} != model {want_counts}")
    if model.has_loader:
        if not deep_equal(rs.loader_state, model.loader, key_order=True):
            raise Violation("restored loader state differs from the last one taken before the checkpoint")
    elif rs.loader_state is not None:
        raise Violation("restore returned a loader state where the model has none")
    if rs.fold_state is not None and rs.fold_state.next_group_id < model.next_gid:
        raise Violation(f"next group id {rs.fold_state.next_group_id} < model's {model.next_gid}")
    used = attempts_on_disk(path)
    # a seal or prefix recorded without a version is read as the group's (the fold's at the point)
    versions = {gid: g.policy_version for gid, g in rs.fold_state.live.items()}
    for g in rs.groups:
        have = None if g.rollouts is None else [
            (r.index, r.attempt, r.sealed, r.locator, r.policy_version) for r in g.rollouts]
        want_rollouts = model.recovered_rollouts(g.group_id, used, versions.get(g.group_id))
        if have != want_rollouts:
            raise Violation(f"restored rollouts of group {g.group_id} {have} != model {want_rollouts}")
        if g.rollouts is not None and [r.progress for r in g.rollouts] != \
                [model.recovered_progress(g.group_id, r.index, step, versions.get(g.group_id)) for r in g.rollouts]:
            raise Violation(f"restored prefixes of group {g.group_id} {[r.progress for r in g.rollouts]} "
                            "!= the model's (the checkpoint's, unless by newer weights)")
    fenced = [[(r.group_id, r.index, r.attempt) for r in e.rollouts] for e in rs.first_commit
              if type(e) is RolloutFailed]
    if fenced != model.fence_rounds(used):
        raise Violation(f"the resume would fence rollouts {fenced}, the model's rounds are "
                        f"{model.fence_rounds(used)}")
    carried = [e for e in rs.first_commit if type(e) is RolloutProgress]
    if carried != model.carried_progress(used, step, versions):
        raise Violation(f"the resume would record prefixes {carried}, the model "
                        f"{model.carried_progress(used, step, versions)}")


class WrittenRows:
    """The data plane of a workload: every row an event it wrote names (rows are durable before
    the journal names them); `lost` ones are gone."""

    def __init__(self, run: Run, lost: frozenset = frozenset()):
        self.rows = {loc for events, _ in run.expected.values() for loc in _locators(events)} - lost

    def has(self, locator: str) -> bool:
        return locator in self.rows


def _locators(events):
    for ev in events:
        if type(ev) is Finished and ev.locators is not None:
            yield from ev.locators
        elif type(ev) in (RolloutSealed, RolloutFailed):
            yield from (r.locator for r in ev.rollouts if r.locator is not None)
        elif type(ev) is RolloutProgress:
            yield ev.ref.locator


def _max_gid_on_disk(path: str) -> int:
    """The highest group id a readable commit of any timeline on disk allocated (-1: none)."""
    reader = Reader(path)
    return max([-1] + [_max_gid(rec.commit.events) for t in reader.timelines for rec in reader.timeline_records(t)])


def expected_salvage(path: str, run: Run, keys: list, at: Model, step: int, rs, lag: int = 0) -> Expected:
    """What `rs`, the restore with salvage (and `max_policy_lag=lag`) of the directory `path` (the
    workload `run`'s active history `keys`, `at` the model at its latest committed checkpoint of
    `step`), must be, by the recovery rules (`recovery_model`); the fresh ids are `rs`'s, checked
    to be fresh here."""
    live = set(at.live())
    new_ids = sorted(g.group_id for g in rs.groups if g.group_id not in live)
    top = _max_gid_on_disk(path)
    if new_ids and (new_ids[0] <= top or new_ids != list(range(new_ids[0], new_ids[0] + len(new_ids)))):
        raise Violation(f"the groups restore demoted or adopted got ids {new_ids}: not consecutive ids "
                        f"above every id on disk (up to {top})")
    return expected_recovery(at, [run.expected[k] for k in keys], at.lsn, step, WrittenRows(run).has,
                             attempts_on_disk(path), admitted_on_disk(path), new_ids, lag)


def check_salvage_restore(path: str, run: Run, keys: list, at: Model, step: int | None, lag: int = 0) -> None:
    """The restore a crashed run resumes from (salvage, the workload's data plane, the trainer's
    `max_policy_lag=lag`) follows the recovery rules: salvage, completion, demotion, fences,
    adoption of the dead tail's takes, work of weights up to `lag` steps newer kept."""
    if step is None:
        return  # the empty state, as `check_restore` checked: nothing is kept
    rs = restore(path, salvage=True, data_plane=WrittenRows(run), max_policy_lag=lag)
    want = expected_salvage(path, run, keys, at, step, rs, lag)
    got = {g.group_id: g.owner for g in rs.groups}
    if got != want.owners:
        raise Violation(f"salvage restore owners {sorted(got.items())} != rules {sorted(want.owners.items())}")
    for g in rs.groups:
        have = None if g.rollouts is None else [
            (r.index, r.attempt, r.sealed, r.locator, r.policy_version, r.progress) for r in g.rollouts]
        if have != want.rollouts[g.group_id]:
            raise Violation(f"salvage restore: rollouts of group {g.group_id} {have} != rules "
                            f"{want.rollouts[g.group_id]}")
    if ([g.replaces for g in rs.demoted], [g.adopted_from for g in rs.adopted]) != (want.demoted_from, want.adopted_from):
        raise Violation(f"salvage restore demoted {[g.replaces for g in rs.demoted]} and adopted "
                        f"{[g.adopted_from for g in rs.adopted]}, the rules {want.demoted_from} and {want.adopted_from}")
    if want.has_loader != (rs.loader_state is not None) or not deep_equal(rs.loader_state, want.loader,
                                                                          key_order=True):
        raise Violation("salvage restore: the loader state is not that of the last adopted take "
                        "(or, with none adopted, of the checkpoint)")
    first = [msgspec.structs.replace(e, loader_state=None) if type(e) is Taken else e
             for e in rs.first_commit if type(e) is not CheckpointCommitted]
    if first != want.first_commit:
        raise Violation(f"salvage restore: first commit {first} != rules {want.first_commit}")


def _check_unsynced_damage(path: str, run: Run, point: int) -> dict:
    """sync="batch"/"none": a later frame of an fsync window reached the disk, an earlier one
    did not. README (Limitations): a strict open reports corruption; the frames after the
    damage were never acknowledged, so the `point_in_time` history holds every flushed commit."""
    reader = Reader(path, "point_in_time")
    have = {}
    for rec in reader.records():
        key = (rec.timeline, rec.commit.lsn)
        if key not in run.expected or not _same_events(rec, *run.expected[key]):
            raise Violation(f"commit {key} on disk was never written as it is")
        have[key] = rec
    for i, tl, lsn in run.acks:
        if i <= point and (tl, lsn) not in have:
            raise Violation(f"flushed commit LSN {lsn} (acked at op {i}) is not in the point-in-time "
                            "history of a journal damaged in an unsynced window")
    try:
        Journal.open(path).close()
    except JournalCorrupt:
        pass
    else:
        raise Violation("a strict reader saw damage that Journal.open accepted")
    return {"damaged": True}


def _max_gid(events) -> int:
    return max([-1] + [ev.groups[-1].group_id for ev in events if type(ev) is Taken and ev.groups])


def check_journal(path: str, run: Run, point: int | None = None, *, reopen: bool = True,
                  append: bool = True) -> dict:
    """Every guarantee on the directory `path` for a crash (or failure) after `point` recorded
    ops (None: all). Raises `Violation` (or the library's exception) on the first broken one."""
    point = len(run.fs.ops) if point is None else point
    try:
        reader = Reader(path)  # strict: a crash of sync="always" writes never leaves corruption
        records = list(reader.records())
    except JournalCorrupt:
        if not run.ack_on_flush:
            raise
        return _check_unsynced_damage(path, run, point)
    end = records[-1].commit.lsn if records else (
        reader.lineage()[0].segments[0].first_lsn - 1 if reader.timelines else 0)
    lineage = reader.lineage() if reader.timelines else []
    present = {}
    for rec in records:
        key = (rec.timeline, rec.commit.lsn)
        if key not in run.expected:
            raise Violation(f"commit {key} (timeline, LSN) is on disk but was never written")
        if not _same_events(rec, *run.expected[key]):
            raise Violation(f"commit {key} on disk differs from what was written")
        present[key] = rec
    keys = history_keys(reader, end) if lineage else []
    on_history = set(keys)
    # a resume is atomic: its branch either is not on disk, or it is with its first commit (the
    # one re-marking the restored checkpoint); then the commits it left behind may be dead
    done_branches = [(t, b) for (i, t, b, first) in run.branches
                     if i <= point or (not first or (t, b + 1) in on_history)]
    active_tls = {tl.timeline for tl in lineage}
    for i, tl, lsn in run.acks:
        if i > point:
            continue
        if (tl, lsn) in on_history:
            continue
        if any(t in active_tls and b < lsn and t > tl for t, b in done_branches):
            continue  # on a dead tail that a (complete) resume left behind
        raise Violation(f"acknowledged commit LSN {lsn} of timeline {tl} (acked at op {i}) is not on the "
                        f"active history (timelines {sorted(active_tls)}, end LSN {end})")
    for i, t, b, _ in run.branches:
        if i <= point and t not in reader.timelines:
            raise Violation(f"the acknowledged branch to timeline {t} at LSN {b} is gone")
    full, at_ckpt, step = model_at(run, keys)
    check_restore(path, at_ckpt, step)
    # every crash state's salvage restore under one of the lags 0-2 (the workloads' tails hold
    # work of weights up to two steps newer than their checkpoints)
    check_salvage_restore(path, run, keys, at_ckpt, step, lag=point % 3)
    snaps = os.path.join(path, SNAPSHOTS_DIR)
    cuts = 0
    if os.path.isdir(snaps):
        for name in sorted(os.listdir(snaps)):
            if name.startswith("cut-"):
                read_cut(os.path.join(snaps, name))  # renamed into place only once complete
                cuts += 1
    if reopen:
        head_retired = bool(lineage) and lineage[0].segments[0].first_lsn > 1
        resume = restore(path) if head_retired else None
        j = Journal.open(path, segment_bytes=run.segment_bytes, resume=resume)
        try:
            if resume is None and j.lsn != end:
                raise Violation(f"reopened journal is at LSN {j.lsn}, the strict reader saw {end}")
            if append:
                (gid,) = j.taken([GroupRef(idx=10_000)])
                used = max([-1] + [_max_gid(run.expected[(t, l)][0]) for i, t, l in run.acks if i <= point]
                           + [_max_gid(r.commit.events) for r in records])
                if gid <= used:
                    raise Violation(f"group id {gid} allocated after the crash was already used (up to {used})")
        finally:
            j.close()
        after = {(r.timeline, r.commit.lsn) for r in Reader(path).records()}
        if resume is None and not set(present) <= after:
            raise Violation("reopening lost commits that were on disk")
    return {"end": end, "cuts": cuts, "step": step}
