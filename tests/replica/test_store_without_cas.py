"""A store that cannot compare-and-swap (obstore's local store, `file://`) cannot hold the
writer's lease: `Journal.open` refuses it with a ReplicaError that says why and what to use,
leaves no lease behind, and the directory opens again without a replica."""

from __future__ import annotations

import os

import pytest

from journal import GroupRef, Journal, ReplicaError


def test_a_store_without_compare_and_swap_is_refused_at_open(tmp_path):
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    with pytest.raises(ReplicaError, match="compare-and-swap.*use an s3://, gs:// or az:// URL"):
        Journal.open(str(tmp_path / "j"), replica="file://" + str(bucket))
    assert os.listdir(bucket) == []  # the lease it created went with the failed open
    with Journal.open(str(tmp_path / "j")) as j:
        assert j.taken([GroupRef(idx=0)]) == [0]
