"""The replica (README "Object storage") against a real S3 server on 127.0.0.1 (moto's server mode): shipping,
restore from the bucket alone, fencing, store faults (a fault-injecting proxy) and hostile
bucket content. No mock of the client library."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import pytest

from journal import (GroupRef, Journal, JournalError, JournalFailed, JournalLocked, JournalWarning,
                     ReplicaConflict, ReplicaError, ReplicaTimeout, layout)
from journal.reader import list_segments
from journal.replica.names import LEASE_NAME, parse_replica_object
from replay import (DamagedCutWarning, NothingToRestore, ReplicaChanged, ReplicaCorrupt, ReplicaGap,
                    ReplicaUnreachable, audit, restore, verify)
from tests.support.cli_run import cli, cli_json, cli_json_lines
from tests.support.s3_support import S3, fault_options, options
from snapshot import compact

SHIP = 0.1


def train(j: Journal, steps: int, start: int = 0) -> None:
    """`steps` prompts trained, each step a committed checkpoint."""
    for i in range(start, start + steps):
        gids = j.taken([GroupRef(idx=i)], loader_state={"pos": i + 1})
        j.admitted(gids, target_step=i + 1)
        j.finished(gids)
        j.trained(gids, step=i + 1)
        j.begin_checkpoint(step=i + 1)
        j.commit_checkpoint(step=i + 1)


def open_replica(path, s3_or_endpoint, prefix, **kw) -> Journal:
    endpoint = s3_or_endpoint if isinstance(s3_or_endpoint, str) else s3_or_endpoint.endpoint
    opts = kw.pop("replica_options", None) or options(endpoint)
    return Journal.open(str(path), replica=S3.url(prefix), replica_options=opts,
                        ship_interval=kw.pop("ship_interval", SHIP), **kw)


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# -- shipping ---------------------------------------------------------------------------


def test_ships_sealed_segments_tail_and_cuts_manifest_last(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix, segment_bytes=4096)
    train(j, 40)
    compact(j.path, at="latest-checkpoint", journal=j, retention=None)
    train(j, 5, start=40)
    j.flush_replica(timeout=30)
    assert j.replica_lag().lsns == 0 and j.replica_lag().error is None
    objects = s3.keys(prefix)
    parsed = [parse_replica_object(n) for n in objects if n != LEASE_NAME]
    assert None not in parsed
    local = list_segments(j.path)
    sealed = {(o.timeline, o.seg_first_lsn): o for o in parsed if o.kind == "sealed"}
    for seg in local[:-1]:  # every sealed segment whole, byte for byte
        with open(seg.path, "rb") as f:
            assert objects[sealed[(seg.timeline, seg.first_lsn)].name] == f.read()
    pieces = sorted((o for o in parsed if o.kind == "piece" and o.seg_first_lsn == local[-1].first_lsn),
                    key=lambda o: o.offset)
    with open(local[-1].path, "rb") as f:
        data = f.read()
    shipped = b"".join(objects[p.name] for p in pieces)  # the tail, contiguous, without the
    assert data[:len(shipped)] == shipped and not any(data[len(shipped):])  # zeros ahead of it
    assert pieces[-1].to_lsn == j.lsn
    cut = os.listdir(os.path.join(j.path, "snapshots"))[0]
    puts = [path for method, path in proxy.requests() if method == "PUT" and f"/cuts/{cut}/" in path]
    assert len(puts) == len(os.listdir(os.path.join(j.path, "snapshots", cut)))
    assert puts[-1].endswith("/" + layout.MANIFEST_NAME)  # the commit marker goes last
    assert all(os.path.exists(os.path.join(j.path, layout.shipped_marker_name(s.timeline, s.first_lsn)))
               for s in local[:-1])
    j.close()


def test_tail_is_shipped_without_flush_and_idle_makes_no_requests(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix)
    lsn = j.begin_checkpoint(step=1)
    wait_for(lambda: any(o and o.kind == "piece" and o.to_lsn >= lsn
                         for o in map(parse_replica_object, s3.keys(prefix))), "the tail piece")
    wait_for(lambda: j.replica_lag().lsns == 0, "the lag to reach 0")
    seen, counted = len(proxy.requests()), j.replica_lag().requests
    time.sleep(10 * SHIP)  # idle: ten ship intervals
    assert proxy.requests(seen) == []  # no LIST, no GET, no HEAD while idle
    assert j.replica_lag().requests == counted and counted["LIST"] == 1  # the open's inventory
    j.close()


def test_flush_replica_and_lag(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, ship_interval=3600.0)  # only flushes ship
    with j.transaction() as tx:  # one commit: a checkpoint of the initial weights
        tx.begin_checkpoint(step=0)
        tx.commit_checkpoint(step=0)
    wait_for(lambda: j.replica_lag().lsns == 0, "the first pass")  # the open's pass
    train(j, 3)
    lag = j.replica_lag()
    assert lag.lsns == 18 and lag.shipped_lsn == 1 and lag.seconds > 0
    j.flush_replica(timeout=30)
    assert j.replica_lag()[:4] == (0.0, 0, j.lsn, None)
    j.close()
    with pytest.raises(JournalError, match="no replica"):
        Journal.open(str(tmp_path / "plain")).replica_lag()


def test_identical_reupload_counts_as_done(s3, proxy, prefix, tmp_path):
    # the request reaches the store but its answer is lost: the retry finds the object there
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix, replica_options=fault_options(proxy.endpoint))
    proxy.arm("lost-answer", 1, methods={"PUT"})
    train(j, 2)
    j.flush_replica(timeout=30)
    assert proxy.injected == 1
    assert j.replica_lag().error is None and j.replica_lag().lsns == 0
    j.close()
    assert restore(S3.url(prefix), replica_options=options(s3.endpoint), at="end").lsn == 12


def test_conflicting_object_stops_shipping_and_is_reported(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "a", s3, prefix)
    train(j, 2)
    j.flush_replica(timeout=30)
    j.close()
    other = Journal.open(str(tmp_path / "b"))  # another history with the same names
    train(other, 3)
    other.close()
    b = open_replica(tmp_path / "b", s3, prefix)
    with pytest.raises(ReplicaConflict, match="shipping stopped") as info:
        b.flush_replica(timeout=30)
    assert info.value.object.startswith("tail/00000001-")
    assert "other bytes for the same piece" in b.replica_lag().error
    b.begin_checkpoint(step=9)  # the journal still commits locally
    b.close()


def test_markers_name_their_replica_and_another_replica_gets_everything(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 20)
    j.flush_replica(timeout=30)
    j.close()
    sealed = list_segments(j.path)[:-1]
    marker = os.path.join(j.path, layout.shipped_marker_name(sealed[0].timeline, sealed[0].first_lsn))
    with open(marker) as f:
        assert f.read() == S3.url(prefix) + "\n"
    other = S3.prefix()
    j = open_replica(tmp_path / "j", s3, other)
    j.flush_replica(timeout=30)
    j.close()
    assert len([n for n in s3.keys(other) if n.startswith("wal/")]) == len(sealed)
    with open(marker) as f:
        assert f.read() == S3.url(other) + "\n"


def test_a_store_object_as_replica(tmp_path):
    from obstore.store import MemoryStore
    store = MemoryStore()
    j = Journal.open(str(tmp_path / "j"), replica=store, ship_interval=SHIP)
    train(j, 3)
    j.flush_replica(timeout=30)
    j.close()
    assert restore(store).step == 3


def test_a_bad_replica_option_is_a_replica_error_and_leaves_the_directory_usable(s3, prefix, tmp_path):
    with pytest.raises(ReplicaError, match="cannot be opened with replica_options keys") as info:
        Journal.open(str(tmp_path / "j"), replica=S3.url(prefix),
                     replica_options={**options(s3.endpoint), "no_such_option": 1})
    assert "no_such_option" in str(info.value)
    Journal.open(str(tmp_path / "j")).close()  # the writer lock was released


def test_new_history_into_a_bucket_holding_one_is_refused(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "a", s3, prefix)
    train(j, 1)
    j.close()
    with pytest.raises(JournalError, match="already holds a journal history"):
        open_replica(tmp_path / "fresh", s3, prefix)
    assert not list_segments(str(tmp_path / "fresh"))


# -- restore from the bucket alone and continue -------------------------------------------


def test_restore_from_bucket_alone_then_continue_on_a_new_timeline(s3, prefix, tmp_path):
    opts = options(s3.endpoint)
    j = open_replica(tmp_path / "node1", s3, prefix, segment_bytes=4096)
    train(j, 30)
    compact(j.path, at="latest-checkpoint", journal=j, retention="delete")
    train(j, 10, start=30)
    gids = j.taken([GroupRef(idx=99)], loader_state={"pos": 41})  # in flight at the loss
    j.flush_replica(timeout=30)
    expected = j.state_copy()
    shutil.rmtree(j.path)  # the node is gone; the writer is never closed
    state = restore(S3.url(prefix), replica_options=opts)
    assert (state.lsn, state.step, state.loader_state) == (239, 40, {"pos": 40})  # its begun LSN
    assert state.base_cut.startswith(S3.url(prefix) + "/cuts/cut-")
    end = restore(S3.url(prefix), replica_options=opts, at="end")
    assert end.lsn == expected.lsn and [g.group_id for g in end.reserved] == gids
    j2 = open_replica(tmp_path / "node2", s3, prefix, resume=state)
    assert j2.timeline == 2
    train(j2, 2, start=40)
    j2.flush_replica(timeout=30)
    j2.close()
    again = restore(S3.url(prefix), replica_options=opts)
    assert again.step == 42 and again.loader_state == {"pos": 42}
    with pytest.raises(JournalFailed):  # the old writer lost its lease to the resume
        wait_for(lambda: j.taken([GroupRef(idx=7)]) and False, "the zombie to fail", timeout=10)


def test_a_resume_ships_its_base_cut_before_the_new_timeline(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "node1", s3, prefix)
    train(j, 3)
    j.close()
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    j2 = open_replica(tmp_path / "node2", proxy.endpoint, prefix, resume=state)
    j2.flush_replica(timeout=30)
    puts = [path for method, path in proxy.requests() if method == "PUT" and not path.endswith("LEASE")]
    first_tail = next(i for i, p in enumerate(puts) if f"/tail/{j2.timeline:08d}-" in p)
    manifest = next(i for i, p in enumerate(puts) if p.endswith("/" + layout.MANIFEST_NAME))
    assert manifest < first_tail  # a crash in between leaves a bucket that restores
    j2.close()


def test_restore_of_an_empty_prefix_is_the_empty_state(s3, prefix):
    with pytest.warns(JournalWarning, match=f"{S3.url(prefix)}: holds no journal history"):
        state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert state.lsn == 0 and state.loader_state is None and state.first_start
    with pytest.raises(NothingToRestore, match=S3.url(prefix)):
        restore(S3.url(prefix), replica_options=options(s3.endpoint), must_exist=True)


def test_verify_and_audit_read_the_bucket_alone(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 30)
    compact(j.path, at="latest-checkpoint", journal=j, retention="delete")
    j.flush_replica(timeout=30)
    j.close()
    shutil.rmtree(j.path)
    url, opts = S3.url(prefix), options(s3.endpoint)
    report = verify(url, replica_options=opts)
    assert report.clean and report.path == url and report.checks
    audited = audit(url, replica_options=opts)
    assert audited.clean and audited.path == url and audited.totals["trained_once"] == 30
    s3.put(prefix, max(n for n in s3.keys(prefix) if n.startswith("tail/")), b"garbage")  # the active tail
    with pytest.raises(ReplicaCorrupt):
        verify(url, replica_options=opts)


def test_journal_inspect_reads_the_bucket_alone(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 12)
    j.flush_replica(timeout=30)
    j.close()
    shutil.rmtree(j.path)
    url, opts = S3.url(prefix), json.dumps(options(s3.endpoint))
    for command in ("summary", "verify", "audit", "cuts", "state"):
        doc = cli_json(command, url, "--replica-options", opts)
        assert doc, command
    assert cli_json("audit", url, "--replica-options", opts)["totals"]["trained_once"] == 12
    assert len(cli_json_lines("log", url, "--replica-options", opts, "--kind", "trained")) == 12
    bad = cli("summary", url, "--replica-options", "{not json", code=2)
    assert "--replica-options is not JSON" in bad.stderr


# -- fencing ----------------------------------------------------------------------------------


def test_second_writer_is_locked_and_takeover_fences_the_zombie(s3, prefix, tmp_path):
    zombie = open_replica(tmp_path / "node1", s3, prefix)
    train(zombie, 3)
    zombie.flush_replica(timeout=30)
    with pytest.raises(JournalLocked, match="another writer holds its lease"):
        open_replica(tmp_path / "node2", s3, prefix)
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    heir = open_replica(tmp_path / "node2", s3, prefix, resume=state)  # a resume takes it over
    before = set(s3.keys(prefix))
    zombie.begin_checkpoint(step=100)  # committed locally; never shipped
    with pytest.raises(JournalFailed, match="lost its lease"):
        zombie.flush_replica(timeout=30)
    with pytest.raises(JournalFailed):
        zombie.begin_checkpoint(step=101)
    heir.flush_replica(timeout=30)
    heir.close()
    new = [parse_replica_object(n) for n in set(s3.keys(prefix)) - before - {LEASE_NAME}]
    assert new and all(o.kind == "cut" or o.timeline == heir.timeline for o in new)  # nothing of the zombie
    zombie.close()


def test_a_takeover_branches_above_the_timeline_the_previous_holder_reserved(s3, prefix, tmp_path):
    j = open_replica(tmp_path / "a", s3, prefix)
    train(j, 2)
    j.close()
    lease = json.loads(s3.keys(prefix)[LEASE_NAME])
    assert lease["reserved"] == 1
    # a holder that reserved timeline 7 and was taken over before it uploaded anything
    s3.put(prefix, LEASE_NAME, json.dumps({**lease, "holder": "zombie", "reserved": 7,
                                                  "renewed": time.time()}).encode())
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    heir = open_replica(tmp_path / "b", s3, prefix, resume=state)
    assert heir.timeline == 8
    heir.close()


def test_expired_or_released_lease_is_taken_by_a_plain_open(s3, prefix, tmp_path):
    s3.put(prefix, LEASE_NAME, json.dumps({"holder": "dead", "renewed": 0.0, "ttl": 30.0}).encode())
    j = open_replica(tmp_path / "a", s3, prefix)
    j.close()  # releases it
    assert json.loads(s3.keys(prefix)[LEASE_NAME])["ttl"] == 0.0
    Journal.open(str(tmp_path / "a"), replica=S3.url(prefix), replica_options=options(s3.endpoint)).close()


def test_a_lease_write_whose_answer_was_lost_is_still_ours(s3, proxy, prefix, tmp_path):
    proxy.arm("lost-answer", 1, methods={"PUT"})  # the create of LEASE is done, its answer lost
    j = open_replica(tmp_path / "a", proxy.endpoint, prefix, replica_options=fault_options(proxy.endpoint))
    assert proxy.injected == 1
    train(j, 1)
    j.flush_replica(timeout=30)
    j.close()


# -- store faults -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["500", "503", "reset", "slow"])
def test_shipping_survives_a_fault_once(s3, proxy, prefix, tmp_path, kind):
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix, replica_options=fault_options(proxy.endpoint),
                     segment_bytes=4096)
    for nth in (1, 2):  # a pass that ships is a HEAD (the lease) and a PUT at least
        proxy.arm(kind, nth)
        train(j, 8, start=nth * 8)
        j.flush_replica(timeout=60)
        assert proxy.injected == 1
    j.close()
    proxy.heal()
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint), at="end")
    assert state.lsn == j.lsn


def test_store_down_lag_grows_and_nothing_unshipped_is_retired(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", proxy.endpoint, prefix, replica_options=fault_options(proxy.endpoint),
                     segment_bytes=4096)
    train(j, 2)
    j.flush_replica(timeout=30)
    proxy.arm("503", 1, persistent=True)
    train(j, 30, start=2)  # commits go on locally
    wait_for(lambda: j.replica_lag().error, "the failure to be reported")
    lag = j.replica_lag()
    assert lag.lsns > 100 and ("503" in lag.error or "Service Unavailable" in lag.error)
    with pytest.raises(ReplicaTimeout, match="shipped through LSN"):
        j.flush_replica(timeout=0.5)
    result = compact(j.path, at="latest-checkpoint", journal=j, retention="delete")
    assert result.retired_segments == []  # none of the sealed ones is in the bucket yet
    proxy.heal()
    j.flush_replica(timeout=60)
    assert compact(j.path, at="latest-checkpoint", journal=j, retention="delete").retired_segments
    j.close()
    shutil.rmtree(j.path)
    assert restore(S3.url(prefix), replica_options=options(s3.endpoint)).step == 32


def test_restore_survives_a_fault_once_and_reports_a_persistent_one(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 20)
    j.flush_replica(timeout=30)
    j.close()
    url, opts = S3.url(prefix), fault_options(proxy.endpoint)
    for nth in (1, 2, 5):
        proxy.arm("500", nth)
        assert restore(url, replica_options=opts).step == 20
    proxy.arm("reset", 3, persistent=True)
    with pytest.raises(ReplicaUnreachable, match="failed 5 times"):
        restore(url, replica_options=opts)


def test_an_object_deleted_while_a_restore_runs_is_a_clear_error(s3, proxy, prefix, tmp_path):
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 20)
    j.flush_replica(timeout=30)
    j.close()
    proxy.arm("vanish", 1, methods={"GET"}, path_contains="/wal/")  # the first segment downloaded
    with pytest.raises(ReplicaChanged, match="was listed but is gone") as info:
        restore(S3.url(prefix), replica_options=fault_options(proxy.endpoint))
    assert info.value.object.startswith("wal/00000001-")


# -- hostile bucket content ----------------------------------------------------------------


@pytest.fixture
def shipped(s3, prefix, tmp_path):
    """A journal of 3 sealed segments, a cut and a tail, shipped; its local copy removed."""
    j = open_replica(tmp_path / "j", s3, prefix, segment_bytes=4096)
    train(j, 20)
    compact(j.path, at="latest-checkpoint", journal=j, retention=None)
    train(j, 40, start=20)
    j.flush_replica(timeout=30)
    j.close()
    shutil.rmtree(j.path)
    objects = s3.keys(prefix)
    sealed = sorted(n for n in objects if n.startswith("wal/"))
    assert len(sealed) >= 3
    return objects, sealed


def test_truncated_or_replaced_object_is_refused(s3, prefix, shipped):
    objects, sealed = shipped
    victim = sealed[1]
    for body in (objects[victim][:-7], bytes(len(objects[victim]))):
        s3.put(prefix, victim, body)
        with pytest.raises(ReplicaCorrupt, match="truncated or was replaced") as info:
            restore(S3.url(prefix), replica_options=options(s3.endpoint))
        assert info.value.object == victim


def test_missing_middle_object_is_a_gap_naming_the_range(s3, prefix, shipped):
    objects, sealed = shipped
    gone = parse_replica_object(sealed[1])
    for name in objects:  # the sealed segment and the pieces it was shipped as while active
        obj = parse_replica_object(name)
        if obj is not None and obj.kind != "cut" and obj.seg_first_lsn == gone.seg_first_lsn:
            s3.delete(prefix, name)
    with pytest.raises(ReplicaGap, match=f"LSNs {gone.from_lsn}..{gone.to_lsn} of timeline 1") as info:
        restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert (info.value.first_lsn, info.value.last_lsn) == (gone.from_lsn, gone.to_lsn)
    end = restore(S3.url(prefix), replica_options=options(s3.endpoint), at="end")
    assert end.lsn == gone.from_lsn - 1  # the point-in-time end: just before the gap


def test_manifest_naming_parent_paths_is_never_followed(s3, prefix, shipped, tmp_path):
    objects, _ = shipped
    name = next(n for n in objects if n.endswith("/" + layout.MANIFEST_NAME))
    manifest = json.loads(objects[name])
    manifest["files"]["../../escape.pt"] = {"size": 1, "sha256": "0" * 64}
    s3.put(prefix, name, json.dumps(manifest).encode())
    s3.put(prefix, name.rsplit("/", 1)[0] + "/../../escape.pt", b"x")
    with pytest.raises(ReplicaCorrupt, match="not a plain path"):  # obstore refuses to list it
        restore(S3.url(prefix), replica_options=options(s3.endpoint))
    s3.delete(prefix, name.rsplit("/", 1)[0] + "/../../escape.pt")
    state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert state.step == 60 and state.base_cut is None  # folded from LSN 1, the cut skipped
    assert any("UnsafePath" in s.reason for s in state.skipped)
    assert not os.path.exists(os.path.join(os.path.dirname(str(tmp_path)), "escape.pt"))


def test_a_damaged_cut_in_the_bucket_warns_naming_it_as_the_bucket_does(s3, prefix, shipped):
    objects, _ = shipped
    name = next(n for n in objects if n.startswith("cuts/") and n.endswith("/rollout_recovery.pt"))
    body = bytearray(objects[name])
    body[40] ^= 0xFF
    s3.put(prefix, name, bytes(body))
    cut = f"{S3.url(prefix)}/{name.rsplit('/', 1)[0]}"
    with pytest.warns(DamagedCutWarning, match=f"{cut}: damaged.*check 4 \\(sha256\\)") as record:
        state = restore(S3.url(prefix), replica_options=options(s3.endpoint))
    assert state.step == 60 and state.base_cut is None  # folded from LSN 1, the cut passed over
    assert [s.path for s in state.skipped] == [cut] and tempfile.gettempdir() not in str(record[0].message)
