"""Test 6 (hypothesis): for random histories with random checkpoint markers, random cuts
(compactions at random LSNs, some with archival of covered segments) and a random dead tail
(crash, restore at a random committed checkpoint, resume on a new branch, go on; up to
twice, so a later restore can land before an earlier branch point),
`restore(step=S)` equals the fold of the active history up to `checkpoint_begun(S)`.

The expected states come from an independent model of the ownership rules (a few dicts),
snapshotted when each `checkpoint_begun` is written; they are compared on live groups (every
field), counts, loader state, next group id and LSN."""

from __future__ import annotations

import copy
import shutil
import tempfile

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import GroupRef, Journal, Owner
from replay import restore
from tests.support.equality import deep_equal
from tests.support.nosync import NOSYNC
from tests.support.replay_support import FIELDS, recovered_view
from snapshot import compact

LIVE = (Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE)


class Model:
    """The ownership state of the active history, kept without the journal's code."""

    def __init__(self) -> None:
        self.lsn = 0
        self.live: dict[int, dict] = {}
        self.counts = {o.name: 0 for o in Owner}
        self.next_gid = 0          # as the fold sees it: 1 + the highest id taken on this history
        self.loader = None
        self.pending: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.snaps: dict[int, dict] = {}   # step -> expected view at its checkpoint_begun
        self.taken: set[int] = set()       # every id taken on this history
        self.committed_at: dict[int, int] = {}  # step -> LSN of its checkpoint_committed

    def view(self) -> dict:
        return {"lsn": self.lsn, "live": {gid: tuple(g[f] for f in FIELDS) for gid, g in self.live.items()},
                "counts": dict(self.counts), "next_group_id": self.next_gid,
                "loader": copy.deepcopy(self.loader), "taken": set(self.taken)}

    def of(self, *owners) -> list[int]:
        return sorted(gid for gid, g in self.live.items() if g["owner"] in owners)

    def move(self, gid: int, to: Owner, **fields) -> None:
        g = self.live[gid]
        self.counts[g["owner"].name] -= 1
        self.counts[to.name] += 1
        if to in LIVE:
            g.update(owner=to, **fields)
        else:
            del self.live[gid]


def _equal(got: dict, want: dict) -> None:
    assert got["lsn"] == want["lsn"]
    assert got["live"] == want["live"], (got["live"], want["live"])
    assert got["counts"] == want["counts"]
    assert got["next_group_id"] == want["next_group_id"]
    assert deep_equal(got["loader"], want["loader"]), (got["loader"], want["loader"])


class Run:
    """A journal driven by hypothesis-drawn operations, mirrored in the model."""

    def __init__(self, path: str, data) -> None:
        self.path, self.data = path, data
        self.m = Model()
        self.max_gid = -1          # the highest id ever handed out, on any branch
        self.step = 0
        self.j = Journal.open(path, sync="none", segment_bytes=4096, fs=NOSYNC)
        self.opened_at = 0         # the LSN when the writer opened: it began the later checkpoints

    def commit(self) -> None:
        self.m.lsn += 1
        assert self.j.lsn == self.m.lsn

    def op(self) -> None:
        d, m, j = self.data, self.m, self.j
        kind = d.draw(st.sampled_from(("take", "take", "divert", "admit", "admit", "finish", "finish",
                                       "train", "train", "discard", "begin", "begin", "commit",
                                       "commit", "commit", "cut", "reopen")))
        if kind == "take":
            n = d.draw(st.integers(1, 3))
            pos = d.draw(st.integers(0, 10 ** 6))
            loader = {"pos": pos, "gen": torch.full((200,), pos % 3, dtype=torch.int32)}
            refs = [GroupRef(idx=d.draw(st.integers(0, 99)), task_name=d.draw(st.sampled_from((None, "math"))),
                             epoch=d.draw(st.sampled_from((None, 0, 1))),
                             fingerprint=d.draw(st.sampled_from((None, b"\x01" * 16)))) for _ in range(n)]
            gids = j.taken(refs, loader_state=loader)
            assert gids == list(range(max(m.next_gid, self.max_gid + 1), max(m.next_gid, self.max_gid + 1) + n))
            for gid, r in zip(gids, refs):
                m.live[gid] = {"group_id": gid, "idx": r.idx, "task_name": r.task_name, "epoch": r.epoch,
                               "fingerprint": r.fingerprint, "owner": Owner.RESERVED, "target_step": None,
                               "policy_version": None, "locator": None, "replaces": None}
                m.counts["RESERVED"] += 1
            m.next_gid = gids[-1] + 1
            self.max_gid = gids[-1]
            m.taken.update(gids)
            m.loader = loader
            self.commit()
        elif kind == "divert" and m.of(Owner.RESERVED):
            gid = d.draw(st.sampled_from(m.of(Owner.RESERVED)))
            j.diverted([gid])
            m.move(gid, Owner.SPARE)
            self.commit()
        elif kind == "admit" and m.of(Owner.RESERVED, Owner.SPARE):
            pool = m.of(Owner.RESERVED, Owner.SPARE)
            gids = d.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
            ts, pv = self.step + d.draw(st.integers(1, 2)), d.draw(st.sampled_from((None, self.step)))
            rep = d.draw(st.sampled_from([None] + sorted(m.taken)[-6:]))  # a spare substitutes for it
            j.admitted(gids, target_step=ts, policy_version=pv, replaces=rep)
            for gid in gids:
                m.move(gid, Owner.ADMITTED, target_step=ts, policy_version=pv, replaces=rep)
            self.commit()
        elif kind == "finish" and m.of(Owner.ADMITTED):
            gids = d.draw(st.lists(st.sampled_from(m.of(Owner.ADMITTED)), min_size=1, max_size=2, unique=True))
            pv = d.draw(st.sampled_from((None, self.step)))
            with_loc = d.draw(st.booleans())
            locs = [f"tq/{g}" for g in gids] if with_loc else None
            j.finished(gids, policy_version=pv, locators=locs)
            for i, gid in enumerate(gids):
                fields = {"locator": locs[i] if locs else None}
                if pv is not None:
                    fields["policy_version"] = pv
                m.move(gid, Owner.REPLAY, **fields)
            self.commit()
        elif kind == "train" and m.of(Owner.REPLAY):
            gids = d.draw(st.lists(st.sampled_from(m.of(Owner.REPLAY)), min_size=1, max_size=3, unique=True))
            j.trained(gids, step=self.step + 1)
            for gid in gids:
                m.move(gid, Owner.TRAINED)
            self.commit()
        elif kind == "discard" and m.live:
            gid = d.draw(st.sampled_from(sorted(m.live)))
            j.discarded([gid], reason="rollout_failed")
            m.move(gid, Owner.DROPPED)
            self.commit()
        elif kind == "reopen":
            # the history continued as it is by a new writer: the checkpoints begun before are
            # no longer its own, so it may begin others while they are pending (which is how
            # several checkpoints come to be pending at once)
            self.j.close()
            self.j = Journal.open(self.path, sync="none", segment_bytes=4096, fs=NOSYNC)
            self.opened_at = m.lsn
        elif kind == "begin" and not any(lsn > self.opened_at for lsn in m.pending.values()):
            # one checkpoint of its own in flight per writer (a begin while it is pending is refused)
            self.step += 1
            lsn = j.begin_checkpoint(step=self.step)
            self.commit()
            assert lsn == m.lsn
            m.pending[self.step] = lsn
            m.snaps[self.step] = m.view()
        elif kind == "commit" and m.pending:
            s = d.draw(st.sampled_from(sorted(m.pending)))
            j.commit_checkpoint(step=s)
            self.commit()
            m.committed[s] = m.pending.pop(s)
            m.committed_at[s] = m.lsn
        elif kind == "cut":
            at = d.draw(st.integers(0, m.lsn))
            retention = d.draw(st.sampled_from((None, "archive")))
            compact(self.path, at=at, retention=retention, keep_cuts=d.draw(st.integers(1, 3)), fs=NOSYNC)

    def crash_and_resume(self) -> None:
        """Kill the run, restore a committed checkpoint (or the empty state), resume from it."""
        m = self.m
        self.j.close()
        if m.committed:
            s0 = self.data.draw(st.sampled_from(sorted(m.committed)), label="restored step")
            state = restore(self.path, step=s0)
            want = m.snaps[s0]
        else:
            s0, state = None, restore(self.path)
            want = Model().view()
        _equal(recovered_view(state), want)
        # the model goes back to the checkpoint: its state then...
        l0 = want["lsn"]
        back = Model()
        back.lsn, back.counts, back.next_gid = l0, dict(want["counts"]), want["next_group_id"]
        back.loader, back.taken = want["loader"], set(want["taken"])
        back.live = {gid: dict(zip(FIELDS, t)) for gid, t in want["live"].items()}
        begun = {s: lsn for s, lsn in {**m.pending, **m.committed}.items() if lsn <= l0}
        back.committed = {s: begun[s] for s in begun if s in m.committed_at and m.committed_at[s] <= l0}
        back.committed_at = {s: m.committed_at[s] for s in back.committed}
        back.pending = {s: lsn for s, lsn in begun.items() if s not in back.committed}
        back.snaps = {s: m.snaps[s] for s in begun}
        # ...plus resume's first commit: every checkpoint pending then but committed on what is
        # now the dead tail is committed again (the restored one among them)
        recommit = sorted((s for s in back.pending if s in m.committed), key=back.pending.get)
        assert sorted(state.recommit) == sorted(recommit)
        self.j = Journal.open(self.path, sync="none", segment_bytes=4096, resume=state, fs=NOSYNC)
        self.m = back
        if recommit:
            back.lsn += 1
            for s in recommit:
                back.committed[s] = back.pending.pop(s)
                back.committed_at[s] = back.lsn
        assert self.j.lsn == back.lsn
        self.opened_at = back.lsn
        self.step = max(back.pending.keys() | back.committed.keys(), default=0)

    def check(self) -> None:
        self.j.close()
        m = self.m
        for s in sorted(m.committed):
            got = restore(self.path, step=s)
            assert got.step == s
            _equal(recovered_view(got), m.snaps[s])
        latest = restore(self.path)
        if m.committed:
            s = max(m.committed, key=m.committed.get)
            assert latest.step == s
            _equal(recovered_view(latest), m.snaps[s])
        else:
            _equal(recovered_view(latest), Model().view())
        _equal(recovered_view(restore(self.path, at="end")), m.view())


@settings(max_examples=30, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_restore_equals_fold_up_to_checkpoint_begun(data):
    path = tempfile.mkdtemp(prefix="replay-prop-")
    try:
        run = Run(path, data)
        for _ in range(data.draw(st.integers(5, 40), label="ops before the crash")):
            run.op()
        for _ in range(data.draw(st.sampled_from((2, 1, 0)), label="dead tails")):
            run.crash_and_resume()
            for _ in range(data.draw(st.integers(0, 25), label="ops after the resume")):
                run.op()
        run.check()
    finally:
        shutil.rmtree(path, ignore_errors=True)
