"""Test 1: a hypothesis state machine drives a real Journal with random legal and illegal
transitions, transactions (some raising mid-block) and reopens, and compares it after
every step with the independent model in `journal_model.py`."""

from __future__ import annotations

import shutil
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from journal import GroupRef, Journal, OwnershipError, Reader
from tests.support.equality import deep_equal
from tests.support.journal_model import (RULES, Illegal, Model, assert_journal_matches, assert_state_matches,
                                         fold_records, tree_bytes)

MOVES = ("diverted", "admitted", "finished", "trained", "discarded")


class Boom(Exception):
    """Raised by the test inside a transaction block."""


def loader_states():
    big = st.integers(0, 3).map(lambda k: {"epoch": k, "gen": torch.full((256,), k, dtype=torch.int32),
                                           "pos": (k, "x")})
    small = st.integers(0, 100).map(lambda n: {"n": n, "t": torch.tensor([n])})
    return st.one_of(st.none(), small, big)


def draw_op(data, m: Model) -> tuple[str, dict, tuple]:
    """One operation, drawn to be legal often but not always: (kind, call args, model event)."""
    kind = data.draw(st.sampled_from(("taken", "taken") + MOVES + ("begin", "commit")))
    known = sorted(m.owners)
    if kind == "taken":
        refs, gids, nxt = [], [], m.next_gid
        for i in range(data.draw(st.integers(1, 3))):  # taken([]) is a bad argument (test_refused_calls)
            how = data.draw(st.sampled_from(("auto", "auto", "jump", "stale")))
            if how == "jump":
                gid = nxt + data.draw(st.integers(0, 2))
            elif how == "stale" and nxt > 0:
                gid = data.draw(st.integers(0, nxt - 1))
            else:
                gid = None
            refs.append(GroupRef(idx=data.draw(st.integers(0, 50)), task_name="math",
                                 epoch=0, fingerprint=b"fp", group_id=gid))
            gids.append(nxt if gid is None else gid)
            nxt = max(nxt, gids[-1] + 1)
        ls = data.draw(loader_states())
        return kind, {"refs": refs, "loader_state": ls}, ("taken", gids, ls)
    if kind in ("begin", "commit"):
        step = data.draw(st.integers(0, 3))
        return kind, {"step": step}, (kind, step)
    holes = [g for g in range(m.next_gid) if g not in m.owners][:3]  # skipped by explicit ids
    candidates = known + holes + [m.next_gid, m.next_gid + 5, -1]
    allowed = RULES[kind][0]
    legal = [g for g in known if m.owners[g] in allowed]
    if legal and data.draw(st.integers(0, 2)):  # mostly groups the move is legal for
        gids = data.draw(st.lists(st.sampled_from(legal), min_size=1, max_size=3, unique=True))
    else:
        gids = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3))
    args: dict = {"gids": gids}
    if kind == "admitted":
        args["target_step"] = data.draw(st.integers(0, 9))
        args["policy_version"] = data.draw(st.none() | st.integers(0, 9))
        args["replaces"] = data.draw(st.none() | st.sampled_from(candidates + holes * 3))
        return kind, args, ("admitted", gids, args["replaces"])
    if kind == "finished":
        args["policy_version"] = data.draw(st.none() | st.integers(0, 9))
        n = data.draw(st.sampled_from((None, len(gids), len(gids), len(gids) + 1)))
        args["locators"] = None if n is None else [f"dp/{i}" for i in range(n)]
        return kind, args, ("finished", gids, args["locators"])
    if kind == "trained":
        args["step"] = data.draw(st.integers(0, 9))
    if kind == "discarded":
        args["reason"] = data.draw(st.sampled_from(("rollout_failed", "stale", "")))
    return kind, args, (kind, gids)


def run(target, kind: str, args: dict):
    """Issue one operation on a Journal or a Transaction."""
    if kind == "taken":
        return target.taken(args["refs"], loader_state=args["loader_state"])
    if kind == "begin":
        return target.begin_checkpoint(step=args["step"])
    if kind == "commit":
        return target.commit_checkpoint(step=args["step"])
    gids = args["gids"]
    kw = {k: v for k, v in args.items() if k != "gids"}
    return getattr(target, kind)(gids, **kw)


def refused_inside(ops, m: Model) -> int | None:
    """Index of the first call that raises inside the transaction's block (OwnershipError):
    a `taken` whose explicit id does not exceed the ids before it in the transaction, or a
    `begin` the writer's checkpoint rules refuse after the calls before it (their events are
    queued whether the fold will accept them or not; it runs at the block's end)."""
    nxt = m.next_gid
    in_flight = {s for s, begun in m.pending.items() if begun > m.open_lsn}
    top = max(m.committed, default=None)
    for i, (kind, args, ev) in enumerate(ops):
        if kind == "taken":
            for ref, gid in zip(args["refs"], ev[1]):
                if ref.group_id is not None and gid < nxt:
                    return i
                nxt = gid + 1
        elif kind == "begin":
            if in_flight or top is not None and args["step"] <= top:
                return i
            in_flight.add(args["step"])
        elif kind == "commit":
            in_flight.discard(args["step"])
            top = args["step"] if top is None else max(top, args["step"])
    return None


class JournalMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="oj-stateful-")
        self.j = Journal.open(self.dir, segment_bytes=4096)
        self.model = Model()
        self.model.appending = True  # it predicts what the writer refuses
        self.reopens = 0

    def teardown(self):
        self.j.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def expect(self, events: list[tuple]) -> Model | None:
        try:
            return self.model.commit(events)
        except Illegal:
            return None

    @rule(data=st.data())
    def single(self, data):
        kind, args, ev = draw_op(data, self.model)
        new = self.expect([ev])
        before = tree_bytes(self.dir)
        if new is None:
            with pytest.raises(OwnershipError):
                run(self.j, kind, args)
            assert tree_bytes(self.dir) == before, "an illegal call changed the journal files"
            return
        result = run(self.j, kind, args)
        if kind == "taken":
            assert result == ev[1]
        else:
            assert result == new.lsn
        self.model = new
        assert tree_bytes(self.dir) != before

    @rule(data=st.data())
    def transaction(self, data):
        ops, running = [], self.model.copy()
        for _ in range(data.draw(st.integers(0, 4))):
            op = draw_op(data, running)
            ops.append(op)
            try:
                trial = running.copy()
                trial.event(op[2], running.lsn + 1)
                running = trial
            except Illegal:
                pass
        raise_at = data.draw(st.none() | st.integers(0, len(ops)))
        stale = refused_inside(ops, self.model)
        new = self.expect([op[2] for op in ops])
        before = tree_bytes(self.dir)
        returned = []

        def body():
            with self.j.transaction() as tx:
                for i, (kind, args, _) in enumerate(ops):
                    if i == raise_at:
                        raise Boom()
                    returned.append(run(tx, kind, args))
                if raise_at == len(ops):
                    raise Boom()
            return tx

        if raise_at is not None:
            exc = OwnershipError if stale is not None and stale < raise_at else Boom
            with pytest.raises(exc):
                body()
        elif new is None or stale is not None:
            with pytest.raises(OwnershipError):
                body()
        else:
            tx = body()
            for (kind, _, ev), r in zip(ops, returned):
                if kind == "taken":
                    assert r == ev[1]
            if ops:
                assert tx.lsn == new.lsn
                self.model = new
                assert tree_bytes(self.dir) != before
            return
        assert tree_bytes(self.dir) == before, "a failed transaction changed the journal files"

    @rule()
    def reopen(self):
        self.j.close()
        self.j = Journal.open(self.dir, segment_bytes=4096)
        self.model.open_lsn = self.model.lsn  # checkpoints begun before are no longer in flight
        self.reopens += 1
        reader = Reader(self.dir)
        assert fold_records(reader.records()).owners == self.model.owners
        assert_state_matches(Reader(self.dir).fold(), self.model)

    @precondition(lambda self: self.model.lsn > 0)
    @rule()
    def strict_reader_agrees(self):
        assert_state_matches(Reader(self.dir).fold(), self.model)

    @invariant()
    def matches_model(self):
        assert_journal_matches(self.j, self.model)
        got = self.j.loader_state()
        if self.model.has_loader:
            assert deep_equal(got, self.model.loader, key_order=True)
        else:
            assert got is None


JournalMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestJournalStateful = JournalMachine.TestCase
