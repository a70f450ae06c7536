"""What a salvage restore reads of the journal: the dead tail after the restore point is read
once, by the fold that finds the point (salvage and the fences use the commits it kept), and
the fences are what every history says (`journal.ever.attempts_used`)."""

from __future__ import annotations

import collections

from journal import GroupRef, Journal, Reader, RolloutRef
from journal.ever import attempts_used
from replay import restore
from tests.support.replay_support import FakeDataPlane
from tests.support.segment_reads import spy_segment_reads

S = 3


def _journal(path: str) -> tuple[int, list[int]]:
    """Four groups admitted with 2 rollouts each at the checkpoint (LSN L), then a long dead
    tail over many small segments: other groups churned, the live groups' rollouts failed
    (some twice) and one sealed. Returns (L, the live group ids)."""
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        live = j.taken([GroupRef(idx=i) for i in range(4)])
        j.admitted(live, target_step=S + 1, policy_version=S, rollouts=2)
        j.rollout_failed([RolloutRef(live[0], 0, 0)], reason="worker lost")
        lsn = j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        for i in range(200):
            (gid,) = j.taken([GroupRef(idx=100 + i)])
            j.admitted([gid], target_step=S + 1)
            if i == 50:
                j.rollout_failed([RolloutRef(g, 1, 0) for g in live], reason="worker lost")
            if i == 150:
                j.rollout_failed([RolloutRef(live[1], 1, 1)], reason="worker lost")
                j.rollout_sealed([RolloutRef(live[2], 0, 0, "tq/2/0")], policy_version=S + 1)
    return lsn, live


def test_salvage_reads_the_dead_tail_once_and_fences_as_every_history_says(
        fast_tmp, monkeypatch):
    path = str(fast_tmp / "j")
    lsn, live = _journal(path)
    r = Reader(path)
    after = [s.name for s in r.segments if s.first_lsn > lsn]
    assert len(after) >= 3
    seen = spy_segment_reads(monkeypatch)
    state = restore(path, data_plane=FakeDataPlane(), salvage=True)
    reads = collections.Counter(seen)
    assert state.lsn == lsn
    assert max(reads[name] for name in after) == 1, dict(reads)
    keys = {(g, i) for g in live for i in range(2)}
    used = attempts_used(Reader(path), keys)
    at_point = {(g.group_id, i): a for g in Reader(path).fold(stop_lsn=lsn).groups()
                for i, a in enumerate(g.rollouts.attempts)}
    for g in state.admitted:
        for rr in g.pending:
            key = (g.group_id, rr.index)
            assert rr.attempt == max(at_point[key], used.get(key, 0)) + 1, key
    assert {(g.group_id, rr.index): rr.attempt for g in state.admitted for rr in g.pending}[(live[1], 1)] == 3
