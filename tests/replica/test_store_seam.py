"""The bucket seam of `journal.replica`: capabilities declared per store and checked before any
request, one `Location` that every entry point takes, the one retry policy and the one parser of
`--replica-options`, the object names."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from journal import Journal, ReplicaError
from journal.replica import parse_options, retry
from journal.replica.store import Location, supports_cas
from journal.replica.names import parse_replica_object, piece_name, sealed_object_name
from replay import Session, audit, restore, verify
from tests.replica.test_replica import SHIP, train
from tests.support.s3_support import S3, options


def test_compare_and_swap_is_declared_per_store():
    from obstore.store import AzureStore, GCSStore, HTTPStore, LocalStore, MemoryStore, S3Store
    s3 = dict(region="us-east-1", skip_signature=True)
    declared = {
        "memory": supports_cas(MemoryStore()),
        "s3": supports_cas(S3Store("b", **s3)),
        "s3 without conditional puts": supports_cas(S3Store("b", conditional_put="disabled", **s3)),
        "gcs": supports_cas(GCSStore("b", skip_signature=True)),
        "azure": supports_cas(AzureStore("c", account_name="a", skip_signature=True)),
        "local": supports_cas(LocalStore()),
        "http": supports_cas(HTTPStore.from_url("https://127.0.0.1:1/p")),
    }
    assert declared == {"memory": True, "s3": True, "s3 without conditional puts": False, "gcs": True,
                        "azure": True, "local": False, "http": False}


def test_a_store_without_compare_and_swap_is_refused_before_any_request(s3, proxy, prefix, tmp_path):
    seen = len(proxy.requests())
    with pytest.raises(ReplicaError, match="compare-and-swap.*use an s3://, gs:// or az:// URL"):
        Journal.open(str(tmp_path / "j"), replica=S3.url(prefix),
                     replica_options=options(proxy.endpoint, conditional_put="disabled"))
    assert proxy.requests(seen) == []  # no LIST, no lease taken and removed again
    Journal.open(str(tmp_path / "j")).close()  # the writer lock was released


def test_one_location_serves_every_entry_point(tmp_path):
    from obstore.store import MemoryStore
    bucket = Location(MemoryStore())
    j = Journal.open(str(tmp_path / "node1"), replica=bucket, ship_interval=SHIP)
    train(j, 2)
    j.flush_replica(timeout=30)
    j.close()
    assert restore(bucket).step == 2
    report = verify(bucket)
    assert report.clean and report.path == bucket.where
    assert audit(bucket).totals["trained_once"] == 2
    with pytest.raises(ValueError, match="the Location .* holds its options"):
        restore(bucket, replica_options={"region": "us-east-1"})
    with Session.open(str(tmp_path / "node2"), replica=bucket) as s:  # a fresh node: from the bucket
        assert s.step == 2 and s.journal.timeline == 2


def test_the_retry_policy_gives_up_after_its_budget_and_passes_verdicts_on():
    calls = []

    def failing():
        calls.append(time.monotonic())
        raise ConnectionError(f"down {len(calls)}")

    with pytest.raises(retry.GaveUp, match="list failed 3 times, the last with ConnectionError: down 3") as info:
        retry.retrying(failing, "list", tries=3)
    assert len(calls) == 3 and info.value.tries == 3 and isinstance(info.value.last, ConnectionError)
    pauses = [b - a for a, b in zip(calls, calls[1:])]
    assert pauses[0] >= retry.BACKOFF_FIRST and pauses[1] >= 2 * retry.BACKOFF_FIRST  # it backs off
    calls.clear()
    with pytest.raises(ConnectionError):  # a final exception is never retried
        retry.retrying(failing, "list", tries=3, final=(ConnectionError,))
    assert len(calls) == 1
    calls.clear()
    deadline = []  # a deadline asked after each failure: one set meanwhile ends the retries
    failures = []
    with pytest.raises(retry.GaveUp):
        retry.retrying(failing, "list", deadline=lambda: deadline[0] if deadline else None,
                       on_failure=lambda exc: failures.append(exc) or (len(failures) == 2 and deadline.append(0.0)))
    assert len(calls) == 2 and [str(e) for e in failures] == ["down 1", "down 2"]
    assert retry.retrying(lambda: 7, "get") == 7


def test_the_one_options_parser():
    assert parse_options('{"region": "us-east-1"}') == {"region": "us-east-1"}
    with pytest.raises(ValueError, match="--replica-options is not JSON"):
        parse_options("{not json")
    with pytest.raises(ValueError, match="--replica-options must be a JSON object"):
        parse_options("[1, 2]")


_SHA = st.text("0123456789abcdef", min_size=64, max_size=64)
_LSN = st.integers(1, 10**19)


@given(st.integers(1, 10**7), _LSN, st.integers(0, 10**6), _SHA)
def test_sealed_object_names_parse_back(timeline, first, length, sha):
    obj = parse_replica_object(sealed_object_name(timeline, first, first + length, sha))
    assert (obj.kind, obj.timeline, obj.seg_first_lsn, obj.from_lsn, obj.to_lsn, obj.sha) == \
        ("sealed", timeline, first, first, first + length, sha[:16])


@given(st.integers(1, 10**7), _LSN, st.integers(0, 10**15), st.integers(0, 10**6), _SHA)
def test_piece_names_parse_back(timeline, first, offset, length, sha):
    obj = parse_replica_object(piece_name(timeline, first, offset, first, first + length, sha))
    assert (obj.kind, obj.timeline, obj.seg_first_lsn, obj.offset, obj.from_lsn, obj.to_lsn, obj.sha) == \
        ("piece", timeline, first, offset, first, first + length, sha[:16])
