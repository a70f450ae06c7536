"""Retention in the bucket (journal/replica/retention.py) and a restore that fetches only its
plan (journal/replica/fetch.py), against the real S3 server of test_replica (moto's server
mode, real conditional writes) and its fault-injecting proxy."""

from __future__ import annotations

import shutil

import pytest

import journal.replica.fetch
import journal.replica.shipper
from journal import GroupRef, JournalFailed, layout
from journal.replica.names import LEASE_NAME, ReplicaObject, parse_replica_object
from replay import ReplicaChanged, restore
from snapshot import compact
from tests.replica.test_replica import open_replica, train
from tests.support.s3_support import S3, fault_options, options


def summary(state) -> tuple:
    """What a trainer resumes from, comparable across two restores."""
    return (state.lsn, state.step, state.loader_state, state.counts,
            [g.group_id for g in state.reserved], [g.group_id for g in state.admitted],
            [g.group_id for g in state.replay])


def segment_objects(names) -> list[ReplicaObject]:
    return [o for o in map(parse_replica_object, names) if o is not None and o.kind != "cut"]


def cuts_in(names) -> set[str]:
    return {o.cut for o in map(parse_replica_object, names) if o is not None and o.kind == "cut"}


def two_compactions(j, keep_cuts: int = 1, start: int = 0):
    """Train, compact, train, compact (retention "delete"), everything shipped; the second
    compaction's result."""
    train(j, 30, start=start)
    compact(j.path, journal=j, retention="delete", keep_cuts=keep_cuts)
    train(j, 30, start=start + 30)
    j.flush_replica(timeout=30)
    result = compact(j.path, journal=j, retention="delete", keep_cuts=keep_cuts)
    j.flush_replica(timeout=30)
    return result


DELETES = {"methods": {"POST"}, "path_contains": "?delete"}  # obstore deletes with S3's DeleteObjects


def test_retention_deletes_what_it_may_and_nothing_else(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix, segment_bytes=4096)
    train(j, 30)
    compact(j.path, journal=j, retention="delete", keep_cuts=1)
    train(j, 30, start=30)
    j.flush_replica(timeout=30)
    before = s3.keys(prefix)
    seen = len(proxy.requests())
    result = compact(j.path, journal=j, retention="delete", keep_cuts=1)
    j.flush_replica(timeout=30)
    after = s3.keys(prefix)
    boundary, kept = result.lsn, f"cut-00000001-{result.lsn:020d}"
    last_first = max(o.seg_first_lsn for o in segment_objects(before))
    # exactly: every cut but the kept one, and the segments wholly at or before the boundary
    # (but the timeline's last), their tail pieces too
    doomed = {n for n in before if (o := parse_replica_object(n)) is not None and (
        o.kind == "cut" and o.cut != kept or o.kind != "cut" and o.seg_first_lsn < last_first and
        next(s.to_lsn for s in segment_objects(before) if s.kind == "sealed" and
             s.seg_first_lsn == o.seg_first_lsn) <= boundary)}
    assert doomed and set(before) - set(after) == doomed
    assert LEASE_NAME in after and cuts_in(after) == {kept}
    assert all(o.to_lsn > boundary or o.seg_first_lsn == last_first for o in segment_objects(after)
               if o.kind == "sealed")
    assert set(result.bucket_retention.deletions) == doomed and j.replica_lag().error is None
    deletes = result.bucket_retention.deletions  # the shipper's order (one request each)
    assert len([m for m, path in proxy.requests(seen) if m == "POST" and path.endswith("?delete")]) == len(deletes)
    for cut in cuts_in(doomed):  # a cut's MANIFEST.json first: from then on it is incomplete
        files = [d for d in deletes if d.startswith(f"cuts/{cut}/")]
        assert files[0].endswith("/" + layout.MANIFEST_NAME)
    order = [parse_replica_object(d) for d in deletes if not d.startswith("cuts/")]
    assert [o.seg_first_lsn for o in order] == sorted(o.seg_first_lsn for o in order)  # oldest first
    assert all(a.kind == "piece" or b.seg_first_lsn > a.seg_first_lsn for a, b in zip(order, order[1:]))
    # the bucket alone restores what the local journal restores
    local = restore(j.path)
    local_end = restore(j.path, at="end")
    j.close()
    shutil.rmtree(j.path)
    url, opts = S3.url(prefix), options(s3.endpoint)
    assert summary(restore(url, replica_options=opts)) == summary(local)
    assert summary(restore(url, replica_options=opts, at="end")) == summary(local_end)


def test_pinned_checkpoint_cuts_survive(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 10)
    pinned = compact(j.path, journal=j, retention="delete", keep_cuts=1)  # the cut of step 10
    train(j, 20, start=10)
    compact(j.path, journal=j, retention="delete", keep_cuts=1, pin_steps={10})
    train(j, 30, start=30)
    j.flush_replica(timeout=30)
    result = compact(j.path, journal=j, retention="delete", keep_cuts=1, pin_steps={10})
    j.flush_replica(timeout=30)
    names = s3.keys(prefix)
    assert cuts_in(names) == {f"cut-00000001-{pinned.lsn:020d}", f"cut-00000001-{result.lsn:020d}"}
    assert result.removed_cuts and result.bucket_retention.deletions  # the step-30 cut went
    local = restore(j.path, step=10)
    j.close()
    shutil.rmtree(j.path)
    assert summary(restore(S3.url(prefix), replica_options=options(s3.endpoint), step=10)) == summary(local)


@pytest.mark.parametrize("keep_cuts", [2, 1])
def test_a_restore_racing_retention_succeeds_or_names_the_object(s3, prefix, tmp_path, monkeypatch, keep_cuts):
    """Retention runs between the restore's LIST and its GETs: with the cut the restore chose
    kept, it succeeds with the whole history as listed; with that cut gone, it raises
    ReplicaChanged naming a deleted object. Never a shorter history."""
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    two_compactions(j, keep_cuts=keep_cuts)
    train(j, 30, start=60)
    j.flush_replica(timeout=30)
    expected = restore(j.path)
    listed = journal.replica.fetch.Listing.__init__
    deleted = set()

    def list_then_retention(self, *args, **kwargs):
        listed(self, *args, **kwargs)
        before = set(s3.keys(prefix))
        compact(j.path, journal=j, retention="delete", keep_cuts=keep_cuts)
        j.flush_replica(timeout=30)
        deleted.update(before - set(s3.keys(prefix)))

    monkeypatch.setattr(journal.replica.fetch.Listing, "__init__", list_then_retention)
    url, opts = S3.url(prefix), options(s3.endpoint)
    if keep_cuts == 2:
        assert summary(restore(url, replica_options=opts)) == summary(expected)
    else:
        with pytest.raises(ReplicaChanged, match="was listed but is gone") as info:
            restore(url, replica_options=opts)
        assert info.value.object in deleted
    assert deleted  # retention did delete while the restore ran
    j.close()


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("nth", [1, 2, 5])
def test_store_fault_sweep_for_retention(s3, proxy, prefix, tmp_path, monkeypatch, nth, persistent):
    """The N-th delete of a retention pass fails once, or from then on: nothing needed is
    deleted, the journal keeps committing, and the pass after the store heals finishes the job."""
    monkeypatch.setattr(journal.replica.shipper, "RETENTION_SECONDS", 0.5)
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix, replica_options=fault_options(proxy.endpoint),
                     segment_bytes=4096)
    train(j, 30)
    compact(j.path, journal=j, retention="delete", keep_cuts=1)
    train(j, 30, start=30)
    j.flush_replica(timeout=30)
    proxy.arm("500", nth, persistent=persistent, **DELETES)
    result = compact(j.path, journal=j, retention="delete", keep_cuts=1)
    j.flush_replica(timeout=60)
    assert proxy.injected >= 1
    url, opts = S3.url(prefix), options(s3.endpoint)
    if persistent:
        assert "retention" in j.replica_lag().error and "retried on the next pass" in j.replica_lag().error
        train(j, 2, start=60)  # the journal keeps working
        assert summary(restore(url, replica_options=opts, at=result.lsn)) == summary(restore(j.path, at=result.lsn))
        proxy.heal()
        train(j, 1, start=62)
        j.flush_replica(timeout=60)
    names = set(s3.keys(prefix))
    assert not names & set(result.bucket_retention.deletions)  # the job is done
    assert j.replica_lag().error is None
    local = restore(j.path)
    j.close()
    assert summary(restore(url, replica_options=opts)) == summary(local)


def test_restore_fetches_only_its_plan_and_fewer_bytes_after_retention(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 60)
    cut = compact(j.path, journal=j, retention=None)  # nothing deleted anywhere
    train(j, 10, start=60)
    j.flush_replica(timeout=30)
    url, opts = S3.url(prefix), fault_options(proxy.endpoint)
    names = s3.keys(prefix)

    def fetched_by_restore(stored: dict[str, bytes]) -> dict[str, int]:
        seen = len(proxy.requests())
        state = restore(url, replica_options=opts)
        assert summary(state) == summary(restore(j.path))
        got = [path.split(prefix + "/", 1)[1] for method, path in proxy.requests(seen)
               if method == "GET" and prefix + "/" in path]  # the objects, not the LIST
        return {n: len(stored[n]) for n in got}

    got = fetched_by_restore(names)
    everything = sum(map(len, names.values())) - len(names[LEASE_NAME])  # what restore fetched before
    segments = segment_objects(names)
    last_first = max(o.seg_first_lsn for o in segments)
    wholly_before = {o.name for o in segments if o.kind == "sealed" and o.to_lsn <= cut.lsn
                     and o.seg_first_lsn != last_first}
    assert wholly_before and not wholly_before & set(got)  # the segments before the cut stay in the bucket
    assert any(n.startswith(f"cuts/cut-00000001-{cut.lsn:020d}/") for n in got)
    assert sum(got.values()) < everything
    # the same restore once retention trimmed the bucket: fewer objects and bytes stored and fetched
    compact(j.path, journal=j, retention="delete", keep_cuts=1)
    j.flush_replica(timeout=30)
    after = s3.keys(prefix)
    assert sum(map(len, after.values())) < sum(map(len, names.values()))
    got_after = fetched_by_restore(after)
    assert sum(got_after.values()) < everything
    j.close()


def test_an_unusable_newest_cut_falls_back_to_the_next_older_one(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 20)
    older = compact(j.path, journal=j, retention=None)
    train(j, 20, start=20)
    newest = compact(j.path, journal=j, retention=None)
    j.flush_replica(timeout=30)
    local = restore(j.path)
    j.close()
    victim = f"cuts/cut-00000001-{newest.lsn:020d}/{layout.DATALOADER_FILE}"
    s3.put(prefix, victim, b"not the file the manifest hashes")
    url, opts = S3.url(prefix), fault_options(proxy.endpoint)
    seen = len(proxy.requests())
    state = restore(url, replica_options=opts)
    assert summary(state) == summary(local)
    assert state.base_cut == f"{url}/cuts/cut-00000001-{older.lsn:020d}"
    got = [path for method, path in proxy.requests(seen) if method == "GET"]
    assert len(got) == len(set(got))  # what the first attempt fetched is not fetched again


def test_retention_after_a_node_loss_keeps_what_the_new_timeline_stands_on(s3, prefix, tmp_path):
    """The heir's retention deletes the cuts it no longer keeps (the lost node's, its own base
    cut once a newer one covers every point) and its own segments before its boundary; the
    lost node's timeline, off the heir's lineage, stays whole; the bucket alone restores what
    the heir's journal restores."""
    url, opts = S3.url(prefix), options(s3.endpoint)
    lost = open_replica(tmp_path / "node1", s3, prefix, segment_bytes=4096)
    two_compactions(lost, keep_cuts=2)
    lost.close()
    shutil.rmtree(lost.path)
    state = restore(url, replica_options=opts)
    heir = open_replica(tmp_path / "node2", s3, prefix, resume=state, segment_bytes=4096)
    heir.flush_replica(timeout=30)
    before = s3.keys(prefix)
    result = two_compactions(heir, start=60)
    after = s3.keys(prefix)
    assert len(cuts_in(before)) == 2 and cuts_in(after) == {f"cut-{heir.timeline:08d}-{result.lsn:020d}"}
    assert {o.name for o in segment_objects(before) if o.timeline == 1} <= set(after)  # the lost node's timeline
    heirs = [o.seg_first_lsn for o in segment_objects(after) if o.timeline == heir.timeline]
    assert heirs and min(heirs) > state.lsn + 1  # the heir's oldest segments went
    local = restore(heir.path)
    heir.close()
    assert summary(restore(url, replica_options=opts)) == summary(local)


def test_a_writer_that_lost_its_lease_deletes_nothing(s3, prefix, tmp_path):
    url, opts = S3.url(prefix), options(s3.endpoint)
    zombie = open_replica(tmp_path / "node1", s3, prefix, segment_bytes=4096)
    train(zombie, 30)
    compact(zombie.path, journal=zombie, retention=None)
    train(zombie, 30, start=30)
    zombie.flush_replica(timeout=30)
    heir = open_replica(tmp_path / "node2", s3, prefix, resume=restore(url, replica_options=opts))
    heir.flush_replica(timeout=30)
    before = set(s3.keys(prefix))
    result = compact(zombie.path, journal=zombie, retention="delete", keep_cuts=1)
    assert result.bucket_retention.deletions  # asked for, never carried out
    with pytest.raises(JournalFailed, match="lost its lease"):
        zombie.flush_replica(timeout=30)
    assert set(s3.keys(prefix)) - {LEASE_NAME} == before - {LEASE_NAME}
    heir.close()
    zombie.close()


def test_retention_across_a_resume_on_the_same_node_restores_as_the_local_journal(s3, prefix, tmp_path):
    """A resume on the same node branches timeline 2 off timeline 1 (whose dead tail follows the
    branch point): retention trims both timelines in the bucket as it retires them locally, and
    the bucket alone restores what the journal restores."""
    url, opts = S3.url(prefix), options(s3.endpoint)
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 30)
    for i in range(30):  # a dead tail after the last checkpoint
        j.taken([GroupRef(idx=1000 + i)])
    j.flush_replica(timeout=30)
    j.close()
    j = open_replica(tmp_path / "j", s3, prefix, resume=restore(j.path), segment_bytes=4096)
    j.flush_replica(timeout=30)
    before = s3.keys(prefix)
    two_compactions(j, start=30)
    assert {o.timeline for o in segment_objects(set(before) - set(s3.keys(prefix)))} == {1, 2}
    local, local_end = restore(j.path), restore(j.path, at="end")
    j.close()
    assert summary(restore(url, replica_options=opts)) == summary(local)
    assert summary(restore(url, replica_options=opts, at="end")) == summary(local_end)
