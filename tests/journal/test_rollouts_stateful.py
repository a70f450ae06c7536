"""The rollout rules (seal, fail, progress, attempts, finish, discard) driven by a hypothesis state
machine against a model of their own, written out again here and not built on
`journal.fold`: after every step the writer, and after reopens a strict reader, agree with
it; an illegal call or transaction leaves every file byte for byte as it was; a crash after
a checkpoint, restore and resume goes back to the checkpoint with the next attempt for
every unsealed rollout, continuing from the prefix it held there unless newer weights made it;
with salvage and a lag bound k, the dead tail's seals and latest prefixes by weights up to the
checkpoint's step plus k are kept too."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from journal import (GroupRef, Journal, Owner, OwnershipError, Progress, Reader, RolloutFailed, RolloutProgress,
                     RolloutRef, RolloutSealed, StaleAttempt)
from replay import restore
from tests.support.journal_model import tree_bytes


class EveryRow:
    """A data plane that still has every row (restore asks only `has`)."""

    def has(self, locator: str) -> bool:
        return True


class Illegal(Exception):
    def __init__(self, stale: bool = False):
        super().__init__()
        self.stale = stale


def spanned(version, given, before: tuple | None) -> tuple:
    """A prefix's (version, since): the newest and, when older, the oldest version among its
    event's `version` and `given` (since_version) and the versions of `before`, the prefix of
    the attempt it extends."""
    known = [v for v in (version, given, *((before[3], before[2]) if before is not None else ())) if v is not None]
    if not known:
        return None, None
    return max(known), (min(known) if min(known) < max(known) else None)


class RolloutModel:
    """gid -> [owner, n or None, attempts, sealed indices, locators]; (gid, index) -> the
    unsealed rollout's latest prefix (locator, tokens, policy version, since)."""

    def __init__(self):
        self.groups: dict[int, list] = {}
        self.progress: dict[tuple[int, int], tuple] = {}
        self.next_gid = 0

    def resumed(self, used: dict, step: int, tail: list | None = None, lag: int = 0) -> "RolloutModel":
        """The model a restore-and-resume at this point (checkpoint `step`) leaves: with salvage
        (`tail`: the ops of the dead tail, every row still in the data plane), an unsealed
        rollout of a group ADMITTED here and not dropped on the tail that the tail sealed by
        weights up to `step + lag` comes back sealed, and one the tail left with a prefix by
        such weights continues from it; a group with every rollout sealed comes back REPLAY
        (its `finished` journaled by the resume); every other unsealed rollout of an ADMITTED
        group gets an attempt above every attempt any history dispatched it in (`used`; ids
        stay used too: next_gid is kept by the caller) and keeps its prefix unless weights
        beyond the bound made it."""
        m = self.copy()
        bound = step + lag
        if tail is not None:
            m.salvage(tail, bound)
        for gid, (owner, n, attempts, sealed, _) in m.groups.items():
            if owner == Owner.ADMITTED and n is not None and len(sealed) == n:
                m.groups[gid][0] = Owner.REPLAY   # completed: the resume journals its `finished`
            elif owner == Owner.ADMITTED and n is not None:
                for i in range(n):
                    if i not in sealed:
                        attempts[i] = max(attempts[i], used.get((gid, i), 0)) + 1
        m.progress = {k: p for k, p in m.progress.items() if p[2] is None or p[2] <= bound}
        return m

    def salvage(self, tail: list, bound: int) -> None:
        """The dead tail's seals and latest prefixes (of a known version up to `bound`) of the
        unsealed rollouts of the groups ADMITTED here that the tail did not drop."""
        dropped = {op[1] for op in tail if op[0] == "discard"}
        seals, prefixes, ended = {}, {}, set()
        for op in tail:
            if op[0] in ("seal", "fail", "progress"):
                key = (op[1], op[2])
                before = prefixes.pop(key, None) or (None if key in ended else self.progress.get(key))
                if op[0] == "seal":  # the newest version of the prefix it completes counts too
                    seals[key] = (spanned(op[5], None, before)[0], op[4])
                elif op[0] == "progress":
                    prefixes[key] = (op[4], op[5], *spanned(op[6], op[7] if len(op) > 7 else None, before))
                if op[0] != "progress":
                    ended.add(key)
        for gid, (owner, n, _, sealed, locators) in self.groups.items():
            if owner != Owner.ADMITTED or n is None or gid in dropped:
                continue
            for i in range(n):
                if i in sealed:
                    continue
                seal, prefix = seals.get((gid, i)), prefixes.get((gid, i))
                if seal is not None and seal[0] <= bound:
                    sealed.add(i)
                    locators[i] = seal[1]
                    self.progress.pop((gid, i), None)
                elif prefix is not None and prefix[2] is not None and prefix[2] <= bound:
                    self.progress[(gid, i)] = prefix

    def copy(self) -> "RolloutModel":
        m = RolloutModel()
        m.groups = {g: [o, n, list(a), set(s), dict(loc)] for g, (o, n, a, s, loc) in self.groups.items()}
        m.progress = dict(self.progress)
        m.next_gid = self.next_gid
        return m

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "take_admit":
            _, n = op
            self.groups[self.next_gid] = [Owner.ADMITTED, n, [0] * (n or 0), set(), {}]
            self.next_gid += 1
            return
        gid = op[1]
        g = self.groups.get(gid)
        if kind in ("seal", "fail", "progress"):
            _, gid, index, attempt, locator = op[:5]
            if g is None or g[0] != Owner.ADMITTED or g[1] is None or not 0 <= index < g[1]:
                raise Illegal()
            if attempt != g[2][index]:  # a late result, also once the retry has sealed
                raise Illegal(stale=True)
            if index in g[3]:
                raise Illegal()
            if kind == "progress":  # the newer prefix supersedes, spanning it
                self.progress[(gid, index)] = (locator, op[5], *spanned(op[6], op[7] if len(op) > 7 else None,
                                                                        self.progress.get((gid, index))))
                return
            self.progress.pop((gid, index), None)  # a seal or a failure ends it
            if kind == "seal":
                g[3].add(index)
                g[4][index] = locator
            else:
                g[2][index] += 1
        elif kind == "finish":
            _, gid, with_locator = op
            if g is None or g[0] != Owner.ADMITTED:
                raise Illegal()
            if g[1] is not None and (with_locator or len(g[3]) != g[1]):
                raise Illegal()
            g[0] = Owner.REPLAY
            if with_locator:
                g[4][None] = "dp/g"  # a group-level row
        elif kind == "train":
            if g is None or g[0] != Owner.REPLAY:
                raise Illegal()
            g[0] = Owner.TRAINED
        elif kind == "discard":
            if g is None or g[0] not in (Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE):
                raise Illegal()
            g[0] = Owner.DROPPED
            self.progress = {k: p for k, p in self.progress.items() if k[0] != gid}


def ops_of(events: list) -> list[tuple]:
    """A resume's first commit as the machine's ops (the rollout events; its `finished` of the
    groups it completed moves no rollout)."""
    ops = []
    for ev in events:
        t = type(ev)
        if t is RolloutSealed:
            ops += [("seal", r.group_id, r.index, r.attempt, r.locator, ev.policy_version) for r in ev.rollouts]
        elif t is RolloutFailed:
            ops += [("fail", r.group_id, r.index, r.attempt, None) for r in ev.rollouts]
        elif t is RolloutProgress:
            r = ev.ref
            ops.append(("progress", r.group_id, r.index, r.attempt, r.locator, ev.tokens, ev.policy_version,
                        ev.since_version))
    return ops


def draw_op(data, m: RolloutModel, step: int = 0) -> tuple:
    kind = data.draw(st.sampled_from(("take_admit", "seal", "seal", "seal", "fail", "fail", "progress",
                                      "progress", "progress", "finish", "train", "discard")))
    if kind == "take_admit":
        return kind, data.draw(st.sampled_from((None, 1, 3, 4)))
    gid = data.draw(st.sampled_from(sorted(m.groups) + [m.next_gid + 3])) if m.groups else 0
    if kind in ("seal", "fail", "progress"):
        g = m.groups.get(gid)
        n = g[1] if g is not None and g[1] else 2
        index = data.draw(st.integers(0, n))  # n itself is out of range
        current = g[2][index] if g is not None and g[1] and index < n else 0
        attempt = data.draw(st.sampled_from((current, current, current, current - 1, current + 1)))
        op = (kind, gid, index, max(attempt, 0), f"dp/{gid}/{index}/{attempt}")
        return with_prefix(data, op, step)
    if kind == "finish":
        return kind, gid, data.draw(st.booleans())
    return kind, gid


def with_prefix(data, op: tuple, step: int) -> tuple:
    """`op`; a "seal" op with the weights that made it, a "progress" op with its prefix's
    locator, tokens and the weights that made it (none given, or around the last checkpoint's
    `step`: before it, at it, up to three steps after it, or far beyond)."""
    version = st.sampled_from((-1, 0, 1, 2, 3, 10 ** 6)).map(lambda d: max(step + d, 0))
    if op[0] == "seal":
        return op + (data.draw(version),)
    if op[0] != "progress":
        return op
    return op[:4] + (f"{op[4]}/p{data.draw(st.integers(0, 99))}", data.draw(st.integers(0, 5000)),
                     data.draw(st.none() | version))


def run(target, op: tuple, journal: Journal):
    kind = op[0]
    if kind == "take_admit":
        gids = target.taken([GroupRef(idx=journal.state_copy().next_group_id)])
        return target.admitted(gids, target_step=1, rollouts=op[1])
    if kind == "seal":
        return target.rollout_sealed([RolloutRef(op[1], op[2], op[3], op[4])], policy_version=op[5])
    if kind == "fail":
        return target.rollout_failed([RolloutRef(op[1], op[2], op[3])], reason="timeout")
    if kind == "progress":
        return target.rollout_progress(RolloutRef(op[1], op[2], op[3], op[4]), tokens=op[5], policy_version=op[6])
    if kind == "finish":
        return target.finished([op[1]], locators=["dp/g"] if op[2] else None)
    if kind == "train":
        return target.trained([op[1]], step=1)
    return target.discarded([op[1]], reason="r")


def assert_matches(state, m: RolloutModel) -> None:
    for gid, (owner, n, attempts, sealed, locators) in m.groups.items():
        assert state.owner_of(gid) == owner, f"group {gid}"
        g = state.live.get(gid)
        if g is None:
            continue
        if n is None:
            assert g.rollouts is None
            continue
        r = g.rollouts
        assert list(r.attempts) == attempts, f"group {gid} attempts"
        assert {i for i in range(n) if r.is_sealed(i)} == sealed, f"group {gid} sealed"
        assert {i: r.locators[i] for i in sealed} == locators
        assert all(r.locators[i] is None for i in range(n) if i not in sealed)
        assert {i: (p.locator, p.tokens, p.policy_version, p.since) for i in range(n)
                if (p := r.progress_of(i)) is not None} == \
            {i: p for (g2, i), p in m.progress.items() if g2 == gid}, f"group {gid} progress"
    assert all(m.groups[gid][0] == Owner.ADMITTED for gid, _ in m.progress)


class RolloutMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="oj-rollouts-")
        self.j = Journal.open(self.dir, sync="none", segment_bytes=4096)
        self.model = RolloutModel()
        self.at_checkpoint = RolloutModel()  # the model as of the last committed checkpoint
        self.step = 0
        self.used: dict[tuple[int, int], int] = {}  # (group, index) -> highest attempt dispatched, any history
        self.tail: list[tuple] = []  # the ops since the last committed checkpoint (a crash's dead tail)

    def teardown(self):
        self.j.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _expect(self, ops) -> tuple[RolloutModel | None, bool]:
        m = self.model.copy()
        try:
            for op in ops:
                m.apply(op)
        except Illegal as exc:
            return None, exc.stale
        return m, False

    def _dispatched(self, ops) -> None:
        """Note the attempts the ops dispatched: a seal its own, a failure the next one."""
        for op in ops:
            if op[0] in ("seal", "fail", "progress"):
                key = (op[1], op[2])
                self.used[key] = max(self.used.get(key, 0), op[3] + (op[0] == "fail"))

    @rule(data=st.data())
    def single(self, data):
        op = draw_op(data, self.model, self.step)
        new, stale = self._expect([op])
        before = tree_bytes(self.dir)
        if new is None:
            with pytest.raises(StaleAttempt if stale else OwnershipError) as info:
                run(self.j, op, self.j)
            if stale:
                assert f"names attempt {op[3]}" in str(info.value) and f"group {op[1]}" in str(info.value)
            assert tree_bytes(self.dir) == before, "an illegal call changed the journal files"
            return
        run(self.j, op, self.j)
        self.model = new
        self._dispatched([op])
        self.tail.append(op)

    def _in_flight(self) -> list[tuple[int, int]]:
        """(group, index) of every unsealed rollout of an ADMITTED group with rollouts=N."""
        return [(gid, i) for gid, (owner, n, _, sealed, _) in sorted(self.model.groups.items())
                if owner == Owner.ADMITTED and n for i in range(n) if i not in sealed]

    @precondition(lambda self: self._in_flight())
    @rule(data=st.data())
    def generate(self, data):
        """A legal step of a rollout in flight (the other rules draw mostly illegal ones): a
        prefix, a newer prefix, a seal or a failure of its current attempt."""
        gid, index = data.draw(st.sampled_from(self._in_flight()))
        attempt = self.model.groups[gid][2][index]
        kind = data.draw(st.sampled_from(("progress", "progress", "progress", "seal", "fail")))
        op = with_prefix(data, (kind, gid, index, attempt, f"dp/{gid}/{index}/{attempt}"), self.step)
        new, _ = self._expect([op])
        run(self.j, op, self.j)
        self.model = new
        self._dispatched([op])
        self.tail.append(op)

    @rule(data=st.data())
    def transaction(self, data):
        ops = [draw_op(data, self.model, self.step) for _ in range(data.draw(st.integers(1, 4)))]
        ops = [op for op in ops if op[0] != "take_admit"]  # ids are allocated inside the block
        new, _ = self._expect(ops)
        before = tree_bytes(self.dir)
        if new is None:
            with pytest.raises(OwnershipError):
                with self.j.transaction() as tx:
                    for op in ops:
                        run(tx, op, self.j)
            assert tree_bytes(self.dir) == before, "a failed transaction changed the journal files"
            return
        with self.j.transaction() as tx:
            for op in ops:
                run(tx, op, self.j)
        self.model = new
        self._dispatched(ops)
        self.tail += ops

    @rule()
    def reopen(self):
        self.j.close()
        assert_matches(Reader(self.dir, "strict").fold(), self.model)
        self.j = Journal.open(self.dir, sync="none", segment_bytes=4096)

    @rule()
    def checkpoint(self):
        self.step += 1
        self.j.begin_checkpoint(step=self.step)
        self.j.commit_checkpoint(step=self.step)
        self.at_checkpoint = self.model.copy()
        self.tail = []

    @precondition(lambda self: self._in_flight())
    @rule(data=st.data())
    def checkpoint_and_go_on(self, data):
        """A checkpoint, then work on the rollouts in flight: what a crash next leaves dead."""
        self.checkpoint()
        for _ in range(data.draw(st.integers(1, 6))):
            if self._in_flight():
                self.generate(data)

    @rule(data=st.data(), lag=st.sampled_from((0, 1, 2)))
    def work_then_crash(self, data, lag):
        """A group admitted with rollouts=3, a checkpoint, work on the rollouts in flight, a
        crash and a restore with salvage: what the lag bound decides."""
        op = ("take_admit", 3)
        new, _ = self._expect([op])
        run(self.j, op, self.j)
        self.model = new
        self.tail.append(op)
        self.checkpoint_and_go_on(data)
        self.crash_restore_resume(lag)

    @rule(lag=st.sampled_from((None, 0, 1, 2)))
    def crash_restore_resume(self, lag):
        """Whatever came after the last committed checkpoint is a dead tail: restore goes back
        to it (`lag` None: without salvage; else with salvage, a data plane that has every row
        and `max_policy_lag=lag`), hands out the unsealed rollouts with their next attempt, and
        the resume records exactly that (a late seal of the old attempt is then stale)."""
        self.j.close()
        if any(owner == Owner.REPLAY and n is None and not with_rows
               for owner, n, _, _, with_rows in self.at_checkpoint.groups.values()):
            lag = None  # with a data plane, such a group's rows count as lost (demotion: not modelled here)
        if lag is None:
            state = restore(self.dir)
            expected = self.at_checkpoint.resumed(self.used, self.step)
        else:
            state = restore(self.dir, salvage=True, data_plane=EveryRow(), max_policy_lag=lag)
            expected = self.at_checkpoint.resumed(self.used, self.step, self.tail, lag)
        expected.next_gid = self.model.next_gid  # ids of the dead tail are never handed out again
        for g in state.admitted:
            _, n, attempts, sealed, locators = expected.groups[g.group_id]
            if n is not None:
                assert [(r.index, r.attempt, r.sealed, r.locator) for r in g.rollouts] == \
                    [(i, attempts[i], i in sealed, locators.get(i)) for i in range(n)]
                assert [r.progress for r in g.rollouts] == \
                    [Progress(p[0], p[1], None, p[2], p[3]) if (p := expected.progress.get((g.group_id, i)))
                     else None for i in range(n)]
        self.j = Journal.open(self.dir, sync="none", segment_bytes=4096, resume=state)
        self.model = expected
        # the checkpoint is the same: a later crash restores its state again, and the resume's
        # first commit (what this restore kept, the fences, the prefixes) is on that dead tail
        self.tail = ops_of(state.first_commit)
        for gid, (owner, n, attempts, sealed, _) in expected.groups.items():
            for i in range(n or 0):
                if owner == Owner.ADMITTED and i not in sealed:
                    self.used[(gid, i)] = max(self.used.get((gid, i), 0), attempts[i])

    @invariant()
    def writer_matches(self):
        assert_matches(self.j.state_copy(), self.model)


RolloutMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestRolloutRules = RolloutMachine.TestCase
