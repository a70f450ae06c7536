"""A resume on a fresh node (nothing local, the history in the bucket alone) continues the
bucket's history as a local resume does: above every timeline in the bucket, with group ids
above every id the bucket's history allocated, dead tails included, also when the history
holds no committed checkpoint yet (the restore point is LSN 0)."""

from __future__ import annotations

import shutil

from journal import GroupRef
from replay import audit, restore
from tests.replica.test_replica import open_replica, train
from tests.support.s3_support import S3, options


def _lose_node(j) -> int:
    """Ship everything, then lose the node (the writer is never closed); the highest group id
    its history allocated."""
    j.flush_replica(timeout=30)
    top = j.state_copy().next_group_id - 1
    shutil.rmtree(j.path)
    return top


def test_ids_after_a_fresh_node_resume_are_above_the_dead_tail(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "node1", s3, prefix)
    train(j, 3)
    j.taken([GroupRef(idx=100 + i) for i in range(5)], loader_state={"pos": 9})  # dead tail
    top = _lose_node(j)
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert state.lsn < j.lsn
    j2 = open_replica(tmp_path / "node2", s3, prefix, resume=state)
    (gid,) = j2.taken([GroupRef(idx=200)])
    assert gid > top, f"group id {gid} reused: the lost node's history allocated up to {top}"
    j2.close()


def test_a_bucket_without_a_checkpoint_resumes_on_a_new_timeline(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "node1", s3, prefix)
    j.taken([GroupRef(idx=i) for i in range(4)], loader_state={"pos": 4})
    top = _lose_node(j)
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert state.lsn == 0
    j2 = open_replica(tmp_path / "node2", s3, prefix, resume=state)
    assert j2.timeline >= 2
    (gid,) = j2.taken([GroupRef(idx=0)], loader_state={"pos": 1})
    assert gid > top
    j2.flush_replica(timeout=30)
    assert j2.replica_lag().error is None
    j2.close()
    again = restore(S3.url(prefix), replica_options=options(s3.endpoint), at="end")
    assert [g.group_id for g in again.reserved] == [gid]
    report = audit(S3.url(prefix), replica_options=options(s3.endpoint))
    assert report.complete and report.problems == 0, (report.totals, report.not_covered)
