"""A local file that goes while a shipping pass reads it (retention retiring a segment beside
the writer, a compaction in another thread) costs the pass, not the shipping: the next pass
lists the directory again and ships the rest. Shipping stops, with an error that says what is
gone, only when files keep going pass after pass (the journal directory deleted, a lost node)."""

from __future__ import annotations

import os
import shutil

import pytest

import journal.replica.shipper
from journal import ReplicaError
from replay import restore
from snapshot import compact
from tests.replica.test_replica import open_replica, train
from tests.support.s3_support import S3, options


def _listing_that_loses_a_file(monkeypatch, times: int) -> list[int]:
    """`list_segments` as the shipper calls it: its first `times` calls find a segment gone."""
    real, calls = journal.replica.shipper.list_segments, []

    def listing(path):
        calls.append(1)
        if len(calls) <= times:
            raise FileNotFoundError(2, "No such file or directory",
                                    os.path.join(path, "00000001-00000000000000000002.wal"))
        return real(path)

    monkeypatch.setattr(journal.replica.shipper, "list_segments", listing)
    return calls


def _summary(state) -> tuple:
    return state.lsn, state.step, [(g.group_id, g.owner) for g in state.groups], state.loader_state


def test_a_file_gone_during_a_pass_is_shipped_around_by_the_next(s3, prefix, tmp_path, monkeypatch):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 4)
    j.flush_replica(timeout=30)
    calls = _listing_that_loses_a_file(monkeypatch, journal.replica.shipper.VANISHED_PASSES - 1)
    train(j, 8, start=4)
    j.flush_replica(timeout=30)
    assert len(calls) > journal.replica.shipper.VANISHED_PASSES - 1
    assert j.replica_lag().error is None
    assert _summary(restore(S3.url(prefix), replica_options=options(s3.endpoint))) == _summary(restore(j.path))
    j.close()


def test_files_gone_pass_after_pass_stop_the_shipping_with_an_error_naming_them(s3, prefix, tmp_path,
                                                                                monkeypatch):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 2)
    j.flush_replica(timeout=30)
    _listing_that_loses_a_file(monkeypatch, 1 << 30)
    train(j, 2, start=2)
    with pytest.raises(ReplicaError, match=r"00000000000000000002\.wal is gone \(3 passes in a row"):
        j.flush_replica(timeout=30)
    j.close()


def test_a_cut_removed_while_it_is_uploaded_is_passed_over(s3, prefix, tmp_path, monkeypatch):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 4)
    j.flush_replica(timeout=30)
    bucket = j._replica.bucket
    real_create, removed = bucket.create, []

    def create(name, data):  # the first cut file's upload finds its cut retired, as obstore would
        if name.startswith("cuts/") and not removed:
            removed.append(name)
            shutil.rmtree(os.path.dirname(str(data)))
            raise FileNotFoundError(2, "No such file or directory (os error 2)")
        return real_create(name, data)

    monkeypatch.setattr(bucket, "create", create)
    compact(j.path, journal=j, retention=None)
    train(j, 4, start=4)
    j.flush_replica(timeout=30)  # it kept retrying the upload of the file that was gone before
    assert removed and j.replica_lag().error is None
    train(j, 2, start=8)
    cut = compact(j.path, journal=j, retention=None)
    j.flush_replica(timeout=30)
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert state.base_cut is not None and state.base_cut.endswith(os.path.basename(cut.cut_path))
    assert _summary(state) == _summary(restore(j.path))
    j.close()
