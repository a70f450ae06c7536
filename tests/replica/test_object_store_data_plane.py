"""`ObjectStoreDataPlane` against a real S3 server on 127.0.0.1 (moto's server mode) beyond the
shared contract (tests/replay/test_data_plane.py): the N-th request of a workload fails once
(HTTP 503, a connection reset mid-upload, an answer lost after the store did the request) and
the workload still ends with exactly the right rows; a store that keeps failing gives
`DataPlaneUnreachable` naming the object once the retries are spent; and a node that lost its
disk restores from the bucket alone, the journal (replica) and the rows (data plane) sharing
one URL."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import torch

from journal import Group, GroupRef, Journal, Owner, RolloutRef, Rollouts
from journal.replica.names import LEASE_NAME
from replay import DataPlaneUnreachable, ObjectStoreDataPlane, restore
from tests.replica.test_replica import SHIP
from tests.support.equality import deep_equal
from tests.support.s3_support import S3, FaultProxy, fault_options, options


def _workload(dp, cut_dir: str, fresh) -> dict:
    """Every kind of request the data plane makes; what it ends with."""
    a = dp.put(1, {"t": torch.arange(5)})
    b = dp.put_rollout(2, 0, 1, {"t": torch.ones(3)})
    c = dp.put(3, {"t": "c"})
    assert dp.has(a) and not dp.has("g9.rows")
    assert dp.delete([c, "g9.rows"]) == 1
    os.makedirs(os.path.join(cut_dir, "data_plane"))
    dp.save(os.path.join(cut_dir, "data_plane"), [_group(1, locator=a), _group(2, rollouts=b)])
    fresh.import_cut(cut_dir)
    return {"rows": {loc: dp.get(loc) for loc in sorted(dp.locators())},
            "imported": {loc: fresh.get(loc) for loc in sorted(fresh.locators())}}


def _group(gid: int, locator: str | None = None, rollouts: str | None = None) -> Group:
    """A REPLAY group with its rows at `locator`, or an ADMITTED one whose one rollout is
    sealed at `rollouts`."""
    r = None if rollouts is None else Rollouts((1,), 1, (rollouts,), (0,))
    return Group(gid, gid, None, 0, None, Owner.REPLAY if r is None else Owner.ADMITTED,
                 locator=locator, rollouts=r)


def no_client_retries(endpoint: str) -> dict:
    """Options without the client's own retries: every retry is the data plane's."""
    opts = fault_options(endpoint)
    opts["retry_config"] = {**opts["retry_config"], "max_retries": 0}
    return opts


EXPECTED = {"g1.rows": {"t": torch.arange(5)}, "g2-r0-a1.rows": {"t": torch.ones(3)}}


def _count_requests(s3, tmp_path) -> int:
    proxy = FaultProxy(s3.port)
    try:
        prefix = S3.prefix()
        opts = no_client_retries(proxy.endpoint)
        dp = ObjectStoreDataPlane(S3.url(prefix), opts)
        fresh = ObjectStoreDataPlane(S3.url(prefix + "-fresh"), opts)
        since = len(proxy.requests())
        got = _workload(dp, str(tmp_path / "count"), fresh)
        assert deep_equal(got, {"rows": EXPECTED, "imported": EXPECTED})
        return len(proxy.requests(since))
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def request_count(s3, tmp_path_factory):
    return _count_requests(s3, tmp_path_factory.mktemp("count"))


@pytest.mark.parametrize("kind", ["503", "reset", "lost-answer"])
def test_the_nth_request_fails_once_and_the_rows_are_right(s3, proxy, tmp_path, request_count, kind):
    assert request_count >= 15
    for nth in range(1, request_count + 1):
        prefix = S3.prefix()
        opts = no_client_retries(proxy.endpoint)
        dp = ObjectStoreDataPlane(S3.url(prefix), opts)
        fresh = ObjectStoreDataPlane(S3.url(prefix + "-fresh"), opts)
        proxy.arm(kind, nth)
        got = _workload(dp, str(tmp_path / f"{kind}-{nth}"), fresh)
        proxy.heal()
        assert proxy.injected == 1, nth
        assert deep_equal(got, {"rows": EXPECTED, "imported": EXPECTED}), (kind, nth)


def test_a_store_that_keeps_failing_is_unreachable_naming_the_object(s3, proxy, prefix):
    dp = ObjectStoreDataPlane(S3.url(prefix), no_client_retries(proxy.endpoint), retry_seconds=1.0)
    proxy.arm("503", persistent=True)
    began = time.monotonic()
    with pytest.raises(DataPlaneUnreachable, match=r"upload object rows/g7\.rows failed \d+ times"):
        dp.put(7, {"x": 1})
    assert time.monotonic() - began < 10 and proxy.injected >= 3   # retried, then gave up
    with pytest.raises(DataPlaneUnreachable, match=r"look up object rows/g7\.rows"):
        dp.has("g7.rows")
    proxy.heal()
    assert dp.put(7, {"x": 1}) == "g7.rows" and dp.get("g7.rows") == {"x": 1}


def test_a_fresh_node_restores_journal_and_rows_from_the_bucket_alone(s3, prefix, tmp_path):
    url, opts = S3.url(prefix), options(s3.endpoint)
    dp = ObjectStoreDataPlane(url, opts)   # the replica's URL: the rows go under rows/
    jdir = str(tmp_path / "node1" / "journal")
    j = Journal.open(jdir, replica=url, replica_options=opts, ship_interval=SHIP)
    plain, whole, half = j.taken([GroupRef(idx=i) for i in range(3)], loader_state={"pos": 3})
    j.admitted([plain], target_step=1, policy_version=0)
    j.admitted([whole, half], target_step=1, policy_version=0, rollouts=2)
    rows = {}
    for gid, i in [(whole, 0), (whole, 1), (half, 1)]:
        rows[gid, i] = {"tokens": torch.randint(0, 9, (4, 8)), "reward": torch.tensor(float(i))}
        j.rollout_sealed([RolloutRef(gid, i, 0, dp.put_rollout(gid, i, 0, rows[gid, i]))],
                         policy_version=0)
    j.finished([whole], policy_version=0)
    rows[plain] = {"tokens": torch.arange(6)}
    j.finished([plain], policy_version=0, locators=[dp.put(plain, rows[plain])])
    j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    j.flush_replica(timeout=30)
    j.close()
    shutil.rmtree(tmp_path / "node1")                       # the node and its disk are gone
    names = set(s3.listing(prefix))
    assert {"rows/g0.rows", "rows/g1-r0-a0.rows", "rows/g1-r1-a0.rows", "rows/g2-r1-a0.rows",
            LEASE_NAME} <= names

    node2 = ObjectStoreDataPlane(url, opts)
    state = restore(url, replica_options=opts, data_plane=node2)
    assert state.step == 1 and state.loader_state == {"pos": 3} and state.demoted == []
    assert sorted(g.group_id for g in state.replay) == [plain, whole]
    for g in state.replay:
        if g.rollouts is None:
            assert deep_equal(node2.get(g.locator), rows[plain])
        else:
            assert all(deep_equal(node2.get(r.locator), rows[whole, r.index]) for r in g.rollouts)
    (h,) = state.admitted
    assert [(r.index, r.sealed) for r in h.rollouts] == [(0, False), (1, True)]
    assert deep_equal(node2.get(h.rollouts[1].locator), rows[half, 1])
    # the journal continues on the new node, its replica beside the rows
    j2 = Journal.open(str(tmp_path / "node2" / "journal"), resume=state, replica=url,
                      replica_options=opts, ship_interval=SHIP)
    j2.rollout_sealed([RolloutRef(half, 0, h.rollouts[0].attempt,
                                  node2.put_rollout(half, 0, h.rollouts[0].attempt, {"late": 1}))])
    j2.flush_replica(timeout=30)
    j2.close()
    # a row lost from the bucket is a rollout to generate again, never a silent gap
    node2.delete([h.rollouts[1].locator])
    again = restore(url, replica_options=opts, data_plane=node2, at="end")
    assert again.lost_rollouts == [(half, 1)]


@pytest.mark.parametrize("bad", ["../rows", "/rows", "a//b", "a/./b", "rows/", "a\\b", None])
def test_a_prefix_that_is_no_plain_relative_path_is_refused(bad):
    with pytest.raises(ValueError, match="prefix"):
        ObjectStoreDataPlane("memory://", prefix=bad)
