"""`LocalDataPlane` beyond the shared contract (tests/replay/test_data_plane.py): rows packed
into append-only files, written by group commit, found by reading the packs.

A put's record is fsynced, and its pack's name durable, before the put returns; puts made at
once share one write and one fdatasync. Child processes SIGKILLed again and again while they
put (and delete) rows leave only complete rows under locators, every row a put returned for
among them; two processes put into one directory at once, each in packs of its own. Deleting
removes packs with no live row, compacts settled packs at most half live (the dead marks they
hold carried over), never touches a pack a live writer appends to, and keeps the disk
proportional to the live rows. A damaged row or a torn tail hides only itself; a row put again
by another writer is written again (durable by its own fsync); rows two writers put under
one locator at once are a conflict at `get`. The object pickles as its root, and a forked or
unpickled copy writes packs of its own."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from journal import Group, Owner
from replay import DataPlaneIOError, LocalDataPlane, RowConflict, RowsCorrupt, RowsNotFound
from replay.data_plane import local, pack_format, pack_writer
from replay.data_plane.pack_format import row_head
from replay.data_plane.rows import encode_rows
from tests.support import packs
from tests.support.equality import deep_equal
from tests.support.faultfs import FaultFS

# numpy rows: the children start without torch, so a kill loop costs little time
ROWS_FOR = '''
import numpy as np
def rows_for(gid, index=None):
    g = np.random.default_rng(gid * 7 + (index or 0))
    return {"gid": gid, "tokens": g.integers(0, 50000, 4096, dtype=np.int32),
            "logprobs": g.standard_normal(4096, dtype=np.float32)}
'''
_scope: dict = {}
exec(ROWS_FOR, _scope)
rows_for = _scope["rows_for"]

# put rows forever (group and rollout rows), printing each locator once its put returned;
# every fifth group the rows of the group five before are deleted (so packs get reclaimed)
CHILD = ROWS_FOR + '''
import itertools, os, sys
from replay import LocalDataPlane
from replay.data_plane import pack_writer
pack_writer.PACK_BYTES = 256 << 10
dp = LocalDataPlane(sys.argv[1])
say = lambda line: os.write(1, (line + "\\n").encode())
say("ready")
for gid in itertools.count(int(sys.argv[2])):
    say("ACK " + dp.put(gid, rows_for(gid)))
    say("ACK " + dp.put_rollout(gid, 0, 0, rows_for(gid, 0)))
    if gid % 5 == 0 and gid >= 5:
        dp.delete([f"g{gid - 5}.rows", f"g{gid - 5}-r0-a0.rows"])
'''


def _want(locator: str):
    gid = int(locator[1:].split("-")[0].split(".")[0])
    return rows_for(gid, 0) if "-r0-a0" in locator else rows_for(gid)


def _disk(root: str) -> int:
    return sum(os.stat(os.path.join(root, n)).st_size for n in os.listdir(root))


def _packs(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.endswith(".pack") and not n.startswith("."))


@pytest.fixture
def small_packs(monkeypatch):
    """Packs retired once they hold three rows of `rows_for`."""
    size = len(encode_rows(rows_for(0)))
    record = len(row_head("g0.rows", size)) + size
    monkeypatch.setattr(pack_writer, "PACK_BYTES", 8 + 2 * record + record // 2)


def test_a_put_returns_once_its_pack_name_and_its_record_are_durable(tmp_path):
    fs = FaultFS()
    dp = LocalDataPlane(str(tmp_path / "rows"), fs=fs)
    fs.ops.clear()
    loc = dp.put(3, {"x": 1})
    kinds = [(o.kind, os.path.basename(o.path)) for o in fs.ops]
    (pack,) = _packs(dp.root)
    assert kinds == [("create", f".tmp-{pack}"), ("write", f".tmp-{pack}"), ("rename", f".tmp-{pack}"),
                     ("fsync_dir", "rows"), ("write", pack), ("fsync", pack)]
    assert fs.ops[-2].data.endswith(packs.stored_bytes(dp.root, loc))
    fs.ops.clear()
    dp.put(4, {"x": 2})                       # the pack is there: one write, one fdatasync
    assert [o.kind for o in fs.ops] == ["write", "fsync"]


def test_concurrent_puts_share_one_write_and_one_fdatasync(tmp_path):
    fs = FaultFS()
    dp = LocalDataPlane(str(tmp_path / "rows"), fs=fs)
    dp.put(0, {"warm": True})                 # the pack exists
    returned: dict[str, int] = {}
    first = threading.Event()

    def hold(kind, path):                     # the first fsync waits until 7 puts queued behind it
        if not first.is_set():
            first.set()
            deadline = time.monotonic() + 10
            while len(dp._commits._queue) < 7 and time.monotonic() < deadline:
                time.sleep(0.001)

    fs.on("fsync", hold)
    fs.ops.clear()

    def put(gid):
        loc = dp.put_rollout(gid, 0, 0, rows_for(gid))
        returned[loc] = len(fs.ops)

    threads = [threading.Thread(target=put, args=(g,)) for g in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writes, fsyncs = fs.ops_of("write"), fs.ops_of("fsync")
    assert len(writes) == len(fsyncs) == 2 and len(returned) == 8
    assert len(packs.records(os.path.join(dp.root, *_packs(dp.root)))) == 9
    in_second = [loc for loc in returned if f"{loc}".encode() in writes[1].data]
    assert len(in_second) == 7
    for loc, ops_then in returned.items():    # each put returned after the fsync covering its write
        covering = fsyncs[0] if loc.encode() in writes[0].data else fsyncs[1]
        assert covering.seq < ops_then
    assert all(deep_equal(dp.get(loc), rows_for(int(loc[1:].split("-")[0]))) for loc in returned)


def test_store_batch_writes_its_rows_at_once_with_an_outcome_each(tmp_path):
    fs = FaultFS()
    dp = LocalDataPlane(str(tmp_path / "rows"), fs=fs)
    kept = dp.put(7, rows_for(7))
    fs.ops.clear()
    out = dp.store_batch([("g1-r0-a0.rows", encode_rows(rows_for(1, 0))), (kept, encode_rows(rows_for(8))),
                          ("g2-r0-a0.rows", encode_rows(rows_for(2, 0)))])
    assert out[0] is None and out[2] is None and isinstance(out[1], RowConflict)
    assert [o.kind for o in fs.ops] == ["write", "fsync"]       # one write, one fdatasync
    fresh = LocalDataPlane(dp.root)
    assert sorted(fresh.locators()) == sorted(["g1-r0-a0.rows", "g2-r0-a0.rows", kept])
    assert deep_equal(fresh.get(kept), rows_for(7)) and deep_equal(fresh.get("g2-r0-a0.rows"), rows_for(2, 0))


def test_a_delete_does_not_wait_for_the_fdatasync_in_flight(tmp_path):
    """The rows are gone from the object at once; their marks go with the next write, which the
    put in flight makes before it returns."""
    fs = FaultFS()
    dp = LocalDataPlane(str(tmp_path / "rows"), fs=fs)
    old = dp.put(1, rows_for(1))
    held, gate = threading.Event(), threading.Event()

    def hold(kind, path):
        if not gate.is_set():
            held.set()
            gate.wait(10)

    fs.on("fsync", hold)
    putting = threading.Thread(target=dp.put, args=(2, rows_for(2)))
    putting.start()
    assert held.wait(10)
    assert dp.delete([old]) == 1                  # while the put's fdatasync is held
    assert not dp.has(old) and old not in set(dp.locators())
    assert LocalDataPlane(dp.root).has(old)       # its mark is not written yet
    gate.set()
    putting.join()
    assert sorted(LocalDataPlane(dp.root).locators()) == ["g2.rows"]


def _gid(locator: str) -> int:
    return int(locator[1:].split("-")[0].split(".")[0])


def test_the_same_rows_put_twice_at_once_are_written_once(tmp_path):
    fs = FaultFS()
    dp = LocalDataPlane(str(tmp_path / "rows"), fs=fs)
    waiting = threading.Event()
    submit = dp._commits.submit

    def spy(items, queued=()):                # the second put waits for the first's record
        if queued:
            waiting.set()
        return submit(items, queued)

    dp._commits.submit = spy
    fs.on("fsync", lambda kind, path: waiting.wait(10))
    threads = [threading.Thread(target=dp.put, args=(5, rows_for(5))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert waiting.is_set()
    (pack,) = _packs(dp.root)
    assert [name for _, name, *_ in packs.records(os.path.join(dp.root, pack))] == ["g5.rows"]
    assert len(fs.ops_of("fsync")) == 1


def test_sigkill_while_putting_and_deleting_leaves_only_complete_rows(tmp_path):
    root = str(tmp_path / "rows")
    rng = random.Random(20)
    start, kills, acked, unacknowledged = 0, 25, set(), 0
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, "-c", CHILD, root, str(start)], stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.05, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        acked |= {line.split()[1].decode() for line in child.stdout.read().splitlines()}
        child.stdout.close()
        dp = LocalDataPlane(root)
        listed = set(dp.locators())
        newest = max(map(_gid, acked))
        # every row a put returned for is there (but those the child deleted since)
        assert {loc for loc in acked if _gid(loc) > newest - 5} <= listed
        for loc in listed:                        # every listed row is whole and exact
            assert deep_equal(dp.get(loc), _want(loc)), loc
        unacknowledged += len({loc for loc in listed if _gid(loc) >= newest} - acked)
        dp.close()
        start = newest + 1 if rng.random() < 0.5 else newest   # or put identical rows again
    assert len(acked) > 4 * kills
    assert unacknowledged > 0, "no kill landed between a record's write and its put's return"
    assert all(n.endswith(".pack") or n.startswith(pack_writer.TMP_PREFIX) for n in os.listdir(root))
    last = LocalDataPlane(root)
    last.delete(list(last.locators()))          # every child is dead: all their packs settled
    assert _packs(root) == [] and list(LocalDataPlane(root).locators()) == []


TWO_WRITERS = ROWS_FOR + '''
import os, sys
from replay import LocalDataPlane
dp = LocalDataPlane(sys.argv[1])
first, count = int(sys.argv[2]), int(sys.argv[3])
sys.stdin.readline()                        # start together
for gid in range(first, first + count):
    dp.put_rollout(gid, 0, 0, rows_for(gid, 0))
    dp.put(999, rows_for(999))              # both put the same rows under one locator
os.write(1, b"done\\n")
sys.stdin.readline()                        # keep the pack (and its lock) until told
'''


def test_two_processes_put_into_one_directory_at_once(tmp_path):
    root = str(tmp_path / "rows")
    procs = [subprocess.Popen([sys.executable, "-c", TWO_WRITERS, root, str(first), "40"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for first in (0, 1000)]
    for p in procs:
        p.stdin.write(b"go\n")
        p.stdin.flush()
    for p in procs:
        assert p.stdout.readline() == b"done\n"
    trainer = LocalDataPlane(root)
    want = {f"g{g}-r0-a0.rows" for g in [*range(40), *range(1000, 1040)]} | {"g999.rows"}
    assert set(trainer.locators()) == want
    assert all(deep_equal(trainer.get(loc), _want(loc)) for loc in want)
    writers = {name.split("-")[0] for name in _packs(root)}
    assert len(writers) == 2                  # a pack of its own per process
    # the writers are alive: deleting everything removes no pack of theirs
    before = _packs(root)
    assert trainer.delete(want) == len(want)
    assert set(before) <= set(_packs(root)) and list(LocalDataPlane(root).locators()) == []
    for p in procs:                           # they exit: their packs settle, the next delete reclaims them
        p.stdin.write(b"exit\n")
        p.stdin.close()
        p.wait()
        p.stdout.close()
    trainer.delete([])
    assert _packs(root) == []


def test_reclaim_removes_dead_packs_and_compacts_those_at_most_half_live(tmp_path, small_packs):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    locs = [dp.put(g, rows_for(g)) for g in range(9)]    # three packs of three rows
    a, b, c = _packs(dp.root)
    dp.close()                                           # the third settles too
    row = os.path.getsize(os.path.join(dp.root, a)) // 3
    assert dp.delete(locs[0:3]) == 3                     # a: no live row left: removed
    assert a not in _packs(dp.root) and {b, c} <= set(_packs(dp.root))
    assert dp.delete(locs[3:4]) == 1                     # b: two of three live: kept
    assert {b, c} <= set(_packs(dp.root))
    assert dp.delete(locs[4:5]) == 1                     # b: one of three live: compacted
    assert b not in _packs(dp.root) and c in _packs(dp.root)
    fresh = LocalDataPlane(dp.root)
    assert sorted(fresh.locators()) == sorted(locs[5:])
    assert all(deep_equal(fresh.get(loc), rows_for(int(loc[1:-5]))) for loc in locs[5:])
    assert _disk(dp.root) <= 4 * row + 1000              # the four live rows, the marks, headers


def test_the_disk_stays_proportional_to_the_live_rows(tmp_path, small_packs):
    """Rows put and deleted in a sliding window, as checkpoints do: the directory holds at most
    twice the live rows plus the active pack."""
    dp = LocalDataPlane(str(tmp_path / "rows"))
    live: list[str] = []
    for step in range(60):
        live += [dp.put_rollout(step, i, 0, rows_for(step, i)) for i in range(4)]
        if len(live) > 12:
            dp.delete(live[:4])
            live = live[4:]
        assert _disk(dp.root) <= 2 * 12 * 32_900 + pack_writer.PACK_BYTES + 32_900 * 4, step
    assert sorted(LocalDataPlane(dp.root).locators()) == sorted(live)


def test_dead_marks_survive_the_compaction_of_the_pack_holding_them(tmp_path, small_packs):
    root = str(tmp_path / "rows")
    writer = LocalDataPlane(root)
    locs = [writer.put(g, rows_for(g)) for g in range(3)]    # one settled pack of three rows
    writer.close()
    (rows_pack,) = _packs(root)
    trainer = LocalDataPlane(root)
    extra = trainer.put(50, rows_for(50))
    (trainers,) = set(_packs(root)) - {rows_pack}
    assert trainer.delete([locs[0]]) == 1        # the mark goes to the trainer's pack, beside `extra`
    assert set(_packs(root)) == {rows_pack, trainers}
    assert trainer.delete([extra]) == 1          # the trainer's pack: only that mark is live
    assert rows_pack in _packs(root) and trainers not in _packs(root)   # compacted
    assert sorted(LocalDataPlane(root).locators()) == sorted(locs[1:])  # the mark carried over


def test_a_damaged_row_or_a_torn_tail_hides_only_itself(tmp_path):
    root = str(tmp_path / "rows")
    dp = LocalDataPlane(root)
    locs = [dp.put(g, rows_for(g)) for g in range(4)]
    del dp                                                    # its process ends: settled, unsealed
    gc.collect()
    packs.overwrite_rows(root, locs[1], b"\x00" * 100)       # bit rot in the second row
    (pack,) = _packs(root)
    path = os.path.join(root, pack)
    os.truncate(path, os.path.getsize(path) - 1000)           # the last row torn
    fresh = LocalDataPlane(root)
    assert sorted(fresh.locators()) == sorted([locs[0], locs[2]])
    with pytest.raises(RowsNotFound, match=locs[1]):
        fresh.get(locs[1])
    assert deep_equal(fresh.get(locs[2]), rows_for(2))
    assert fresh.put(3, rows_for(3)) == locs[3]                # put again: whole in a new pack
    assert deep_equal(LocalDataPlane(root).get(locs[3]), rows_for(3))


def test_a_sealed_pack_is_read_by_its_headers_alone(tmp_path, monkeypatch):
    """`close` (and a pack's retirement) seals it once every row in it was fsynced: readers
    then check the headers, not the bodies, and damage on disk is found at `get`."""
    root = str(tmp_path / "rows")
    dp = LocalDataPlane(root)
    locs = [dp.put(g, rows_for(g)) for g in range(3)]
    dp.close()
    (pack,) = _packs(root)
    assert [t for t, *_ in packs.records(os.path.join(root, pack))] == [b"ROW1"] * 3 + [b"END1"]
    packs.overwrite_rows(root, locs[1], b"\x00" * 100)
    hashed = []
    real = pack_format._intact
    monkeypatch.setattr(pack_format, "_intact", lambda body: hashed.append(1) or real(body))
    fresh = LocalDataPlane(root)
    assert sorted(fresh.locators()) == sorted(locs) and hashed == []
    with pytest.raises(RowsCorrupt, match=f"{locs[1]}.*{pack}"):
        fresh.get(locs[1])
    assert deep_equal(fresh.get(locs[2]), rows_for(2))
    os.truncate(os.path.join(root, pack), os.path.getsize(os.path.join(root, pack)) - 1)   # no seal
    assert sorted(LocalDataPlane(root).locators()) == sorted([locs[0], locs[2]]) and len(hashed) == 3


@pytest.mark.parametrize("how", ["cut short", "a hole of zeros"])
def test_a_row_a_live_writer_is_still_writing_is_picked_up_once_whole(tmp_path, how):
    """A reader waits at a row it finds incomplete or failing its sha256 in a pack whose
    writer is alive (a write in progress; on NFS bytes may arrive out of order)."""
    root = str(tmp_path / "rows")
    writer = LocalDataPlane(root)
    writer.put(1, rows_for(1))
    (pack,) = _packs(root)
    path = os.path.join(root, pack)
    reader = LocalDataPlane(root)
    assert list(reader.locators()) == ["g1.rows"]
    before = os.path.getsize(path)
    loc2 = writer.put(2, rows_for(2))
    grown = open(path, "rb").read()
    half = before + (len(grown) - before) // 2
    with open(path, "r+b") as f:               # the second record as a reader may find it
        if how == "cut short":
            f.truncate(half)
        else:
            f.seek(half)
            f.write(bytes(len(grown) - half))
    assert not reader.has(loc2) and list(reader.locators()) == ["g1.rows"]
    with open(path, "r+b") as f:               # the rest arrives
        f.seek(before)
        f.write(grown[before:])
    assert reader.has(loc2) and deep_equal(reader.get(loc2), rows_for(2))


def test_a_failed_write_or_fsync_cuts_its_batch_off_and_retires_the_pack(tmp_path):
    """After a failed fsync the kernel may have dropped the batch's pages: a record written
    behind them could never be read (reading a pack stops at a header that does not check).
    So the batch is cut off, the pack retired, and the next put starts a new pack."""
    root = str(tmp_path / "rows")
    fs = FaultFS()
    dp = LocalDataPlane(root, fs=fs)
    dp.put(1, rows_for(1))
    (first,) = _packs(root)
    size = os.path.getsize(os.path.join(root, first))
    fs.inject("fsync", nth=1)
    with pytest.raises(DataPlaneIOError, match=f"fsync .* of pack {first}"):
        dp.put(2, rows_for(2))
    assert os.path.getsize(os.path.join(root, first)) == size and not dp.has("g2.rows")
    dp.put(2, rows_for(2))
    assert len(_packs(root)) == 2 and len(packs.records(os.path.join(root, first))) == 1
    assert sorted(LocalDataPlane(root).locators()) == ["g1.rows", "g2.rows"]


def test_rows_put_again_by_another_writer_are_written_again_and_fsynced(tmp_path):
    root = str(tmp_path / "rows")
    loc = LocalDataPlane(root).put(7, rows_for(7))
    fs = FaultFS()
    other = LocalDataPlane(root, fs=fs)
    fs.ops.clear()
    assert other.put(7, rows_for(7)) == loc                  # not known durable to it: written
    assert [o.kind for o in fs.ops][-2:] == ["write", "fsync"]
    fs.ops.clear()
    assert other.put(7, rows_for(7)) == loc                  # its own now: done already
    assert fs.ops == []
    assert other.delete([loc]) == 1 and not LocalDataPlane(root).has(loc)   # every copy deleted


def test_two_writers_putting_other_rows_under_one_locator_at_once_conflict_at_get(tmp_path):
    root = str(tmp_path / "rows")
    a, b = LocalDataPlane(root), LocalDataPlane(root)
    a.has("g1.rows"), b.has("g1.rows")                       # both read the directory first
    a.put(1, {"v": 1})
    b.put(1, {"v": 2})                                        # b did not know of a's
    with pytest.raises(RowConflict, match=r"g1\.rows.*packs"):
        LocalDataPlane(root).get("g1.rows")


def test_pickles_as_its_root_and_a_copy_writes_packs_of_its_own(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    assert dp.__reduce__() == (LocalDataPlane, (dp.root,))
    dp.put(1, {"x": 1})
    twin = pickle.loads(pickle.dumps(dp))
    twin.put(2, {"x": 2})
    assert len({n.split("-")[0] for n in _packs(dp.root)}) == 2
    assert twin.get("g1.rows") == {"x": 1} and dp.get("g2.rows") == {"x": 2}


def _put_in_child(dp: LocalDataPlane) -> None:
    dp.put(2, {"child": True})


def test_a_forked_child_writes_packs_of_its_own(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    dp.put(1, {"parent": True})
    (parents,) = _packs(dp.root)
    child = multiprocessing.get_context("fork").Process(target=_put_in_child, args=(dp,))
    child.start()
    child.join()
    assert child.exitcode == 0
    dp.put(3, {"parent": True})
    assert len(_packs(dp.root)) == 2 and len(packs.records(os.path.join(dp.root, parents))) == 2
    assert LocalDataPlane(dp.root).get("g2.rows") == {"child": True}


def test_save_writes_one_file_per_locator_with_the_stored_bytes(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    loc = dp.put(4, rows_for(4))
    (tmp_path / "cut").mkdir()
    dp.save(str(tmp_path / "cut"), [Group(4, 0, None, 0, None, Owner.REPLAY, locator=loc)])
    assert os.listdir(tmp_path / "cut") == [loc]
    assert (tmp_path / "cut" / loc).read_bytes() == packs.stored_bytes(dp.root, loc)


def test_remove_leftovers_spares_the_pack_a_live_writer_is_creating(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    live, dead = (os.path.join(dp.root, f"{pack_writer.TMP_PREFIX}{i:016x}-00000000.pack") for i in (1, 2))
    for path in (live, dead):
        open(path, "wb").close()
    os.utime(dead, (time.time() - 2 * local.LEFTOVER_SECONDS,) * 2)
    assert dp.remove_leftovers() == 1
    assert os.listdir(dp.root) == [os.path.basename(live)]
