"""The store's I/O-error sweep for shipping (README "Object storage", Faults): the N-th request
a shipping journal makes after its open fails once, or fails from then on until the store
heals, for every N of a workload that ships segments, tail pieces and a cut. Commits go on
locally throughout, the failure is reported while it lasts, and once the store answers the
bucket holds the whole history: a restore from the bucket alone equals the local journal.
(Restore's and retention's sweeps: test_replica.py and test_bucket_retention.py.)

OJ_STORE_SWEEP=all sweeps every N; the default takes a spread of them."""

from __future__ import annotations

import os

import pytest

from journal import ReplicaTimeout, layout
from journal.replica.names import LEASE_NAME
from replay import restore
from snapshot import compact
from tests.replica.test_replica import open_replica, train
from tests.support.s3_support import S3, fault_options, options


def _workload(j) -> None:
    """Sealed segments, tail pieces and a cut with its manifest."""
    train(j, 6)
    compact(j.path, at="latest-checkpoint", journal=j)
    train(j, 6, start=6)


def _requests_of_the_workload(s3, proxy, prefix, tmp_path) -> int:
    j = open_replica(tmp_path / "count", proxy.endpoint, prefix + "-count",
                     replica_options=fault_options(proxy.endpoint), segment_bytes=4096)
    since = len(proxy.requests())
    _workload(j)
    j.flush_replica(timeout=60)
    n = len(proxy.requests(since))
    j.close()
    return n


def _which(n: int) -> list[int]:
    if os.environ.get("OJ_STORE_SWEEP") == "all":
        return list(range(1, n + 1))
    return sorted({1, 2, 3, n // 3, n // 2, n - 1, n} - {0})


@pytest.fixture(scope="module")
def request_count(s3, tmp_path_factory):
    from tests.support.s3_support import FaultProxy
    proxy = FaultProxy(s3.port)
    try:
        return _requests_of_the_workload(s3, proxy, "sweep-count", tmp_path_factory.mktemp("count"))
    finally:
        proxy.stop()


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "until-healed"])
def test_the_nth_request_of_shipping_fails(s3, proxy, prefix, tmp_path, request_count, persistent):
    assert request_count > 8  # the workload makes LIST-free passes of HEADs and PUTs
    for nth in _which(request_count):
        where = f"{prefix}-{nth}"
        j = open_replica(tmp_path / f"j{nth}", proxy.endpoint, where,
                         replica_options=fault_options(proxy.endpoint), segment_bytes=4096)
        proxy.arm("503", nth, persistent=persistent)
        _workload(j)  # every commit acknowledged locally, whatever the store answers
        if persistent:
            try:
                j.flush_replica(timeout=3)
            except ReplicaTimeout:
                assert proxy.injected, nth  # only the fault holds shipping up
            if proxy.injected:
                assert j.replica_lag().error, f"request {nth} fails and nothing says so"
        proxy.heal()
        j.flush_replica(timeout=60)
        assert j.replica_lag().lsns == 0 and j.replica_lag().error is None, nth
        assert proxy.injected >= 1 or proxy.matched < nth, nth
        j.close()
        local = restore(j.path)
        remote = restore(S3.url(where), replica_options=options(s3.endpoint))
        assert (remote.lsn, remote.step, remote.loader_state) == (local.lsn, local.step, local.loader_state), nth
        names = set(s3.keys(where))
        assert LEASE_NAME in names and any(n.endswith(layout.MANIFEST_NAME) for n in names), nth
