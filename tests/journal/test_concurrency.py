"""Test 7 and the concurrency guarantees: one writer per directory (JournalLocked from
another process), read-only Readers beside a live writer, group ids that only grow across
reopens, group commit (threads share fsyncs), and AsyncJournal under asyncio."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time

import pytest
import torch

from tests.support.faultfs import FaultFS
from journal import AsyncJournal, GroupRef, Journal, JournalLocked, Reader
from tests.support.journal_model import (Model, assert_journal_matches, assert_state_matches, drive,
                                         events_of, fold_records, frames, segment_files)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SECOND_WRITER = r"""
import sys
from journal import Journal, JournalLocked, Reader
path = sys.argv[1]
def attempt():
    try:
        j = Journal.open(path)
    except JournalLocked as e:
        return "locked"
    j.close()
    return "opened"
print(attempt(), Reader(path).fold().lsn, flush=True)
sys.stdin.readline()          # the parent closes its writer, then says go
print(attempt(), Reader(path).fold().lsn, flush=True)
"""


def test_second_writer_in_another_process_is_locked_out(tmp_path):
    path = str(tmp_path / "j")
    j = Journal.open(path)
    m = drive(j, Model(), random.Random(11), 10)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-c", SECOND_WRITER, path], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        verdict, lsn = child.stdout.readline().split()
        assert verdict == "locked"
        assert int(lsn) == m.lsn  # the read-only Reader works while the writer is active
        with pytest.raises(JournalLocked):  # a second open in this process is refused too
            Journal.open(path)
        j.close()
        child.stdin.write("go\n")
        child.stdin.flush()
        verdict, lsn = child.stdout.readline().split()
        assert (verdict, int(lsn)) == ("opened", m.lsn)
    finally:
        child.stdin.close()
        assert child.wait(60) == 0
    with Journal.open(path) as j:
        assert_journal_matches(j, m)


def test_reader_beside_a_live_writer(fast_tmp):
    """A writer appends (rotating segments) while strict Readers fold the directory over and
    over: no reader ever fails, and each sees a prefix of the acknowledged history."""
    path = str(fast_tmp / "j")
    j = Journal.open(path, segment_bytes=4096)
    history = [Model()]
    done = threading.Event()
    errors = []

    def writer():
        try:
            drive(j, history[-1], random.Random(12), 300, history, loader_every=3)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    seen = []  # a reader can see a commit before its writer call returns: compare at the end
    while not done.is_set() or len(seen) < 3:
        r = Reader(path)
        st = r.fold()
        assert all(p.kind == "torn" for p in r.problems), r.problems
        seen.append(st)
    t.join()
    j.close()
    assert not errors, errors
    assert [st.lsn for st in seen] == sorted(st.lsn for st in seen)
    for st in seen:
        assert_state_matches(st, history[st.lsn])
    assert_state_matches(Reader(path).fold(), history[-1])


def test_group_ids_only_grow_across_reopen(fast_tmp):
    path = str(fast_tmp / "j")
    issued = []
    with Journal.open(path) as j:
        issued += j.taken([GroupRef(idx=1), GroupRef(idx=2)])
        issued += j.taken([GroupRef(idx=3, group_id=10)])  # explicit ids may jump
        j.admitted([issued[-1]], target_step=1)
        j.discarded([issued[-1]], reason="x")  # the highest id is terminal now
    for _ in range(3):
        with Journal.open(path) as j:
            assert j.owner_of(issued[-1]) is not None
            issued += j.taken([GroupRef(idx=4)])
            with j.transaction() as tx:
                issued += tx.taken([GroupRef(idx=5), GroupRef(idx=6)])
                issued += tx.taken([GroupRef(idx=7)])
    assert issued == sorted(issued) and len(set(issued)) == len(issued)
    assert issued[:3] == [0, 1, 10] and issued[3] == 11
    assert sorted(fold_records(Reader(path).records()).owners) == issued


def _threads(n, target):
    barrier = threading.Barrier(n)
    errors = []

    def run(i):
        barrier.wait()
        try:
            target(i)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("call", ["admitted", "taken", "transaction"])
def test_group_commit_shares_fsyncs(fast_tmp, call):
    """8 threads commit concurrently with sync="always": every commit is acknowledged with
    its own LSN and is on disk, and the commits share fsyncs (fewer fsyncs than commits)."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs)
    per = 20
    gids = j.taken([GroupRef(idx=i) for i in range(8 * per)])
    # widen the window in which the other threads queue behind a leader (never asserted on)
    fs.on("fsync", lambda kind, p: time.sleep(0.002))
    lsns: dict[int, list] = {i: [] for i in range(8)}
    before = fs.count("fsync", path_contains=".wal")
    lsn0 = j.lsn

    def work(i):
        for r in range(per):
            if call == "admitted":
                lsns[i].append(j.admitted([gids[i * per + r]], target_step=r))
            elif call == "taken":
                (g,) = j.taken([GroupRef(idx=1000 + i * per + r)], loader_state={"thread": i, "r": r})
                lsns[i].append((g, j.owner_of(g)))
            else:
                with j.transaction() as tx:
                    tx.diverted([gids[i * per + r]])
                    tx.admitted([gids[i * per + r]], target_step=r)
                lsns[i].append(tx.lsn)

    _threads(8, work)
    commits = 8 * per
    fsyncs = fs.count("fsync", path_contains=".wal") - before
    assert j.lsn == lsn0 + commits
    if call == "taken":
        new = sorted(g for v in lsns.values() for g, _ in v)
        assert len(set(new)) == commits and all(o is not None for v in lsns.values() for _, o in v)
        for v in lsns.values():
            assert [g for g, _ in v] == sorted(g for g, _ in v)
    else:
        every = sorted(x for v in lsns.values() for x in v)
        assert every == list(range(lsn0 + 1, lsn0 + commits + 1))
    j.close()
    assert fsyncs < commits, f"{fsyncs} fsyncs for {commits} commits: no group commit"
    disk = fold_records(Reader(path).records())
    assert disk.lsn == lsn0 + commits


def test_async_journal_concurrent_awaits(fast_tmp):
    """Concurrent awaits share the journal; the event loop keeps running while an fsync is in
    progress (the first fsync waits until a coroutine on the loop releases it)."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs)
    aj = AsyncJournal(j)
    entered, gate = threading.Event(), threading.Event()

    def hold_first_fsync(kind, p):
        if p.endswith(".wal") and not gate.is_set():
            entered.set()
            if not gate.wait(30):
                raise AssertionError("the event loop was blocked while a commit was in flight")

    async def release_gate():
        while not entered.is_set():
            await asyncio.sleep(0.001)
        gate.set()

    async def main():
        fs.on("fsync", hold_first_fsync)
        results = await asyncio.gather(release_gate(),
                                       *[aj.taken([GroupRef(idx=i)]) for i in range(16)])
        gids = sorted(g for r in results[1:] for g in r)
        assert gids == list(range(16))
        lsns = await asyncio.gather(*[aj.admitted([g], target_step=1) for g in gids[:8]],
                                    *[aj.diverted([g]) for g in gids[8:]])
        assert sorted(lsns) == list(range(17, 33))
        await aj.flush()
        return gids

    gids = asyncio.run(main())
    assert j.lsn == 32
    assert {j.owner_of(g).name for g in gids[:8]} == {"ADMITTED"}
    assert {j.owner_of(g).name for g in gids[8:]} == {"SPARE"}
    j.close()
    assert fold_records(Reader(path).records()).lsn == 32


def test_group_commit_across_rotations_survives_crashes_at_every_op(fast_tmp):
    """8 threads (small segments, loader-state blobs, frames of several commits that can span a
    rotation); a power loss after any recorded operation keeps every acknowledged commit
    with its events, and the image opens to the fold of its own records."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs, segment_bytes=4096)
    base = j.taken([GroupRef(idx=i) for i in range(8 * 6)])
    fs.on("write", lambda kind, p: time.sleep(0.0005))  # let frames collect several commits
    acks: list[tuple[int, int, list]] = []  # (ops when acknowledged, lsn, events)
    lock = threading.Lock()

    def work(i):
        for r in range(6):
            g = base[i * 6 + r]
            if r % 2:
                lsn, evs = j.admitted([g], target_step=r), [("admitted", [g], None)]
            else:
                with j.transaction() as tx:
                    (new,) = tx.taken([GroupRef(idx=1000 + i, fingerprint=bytes(150))],
                                      loader_state={"thread": i, "gen": torch.full((80,), i)})
                    tx.diverted([g])
                lsn, evs = tx.lsn, [("taken", [new], "loader"), ("diverted", [g])]
            with lock:
                acks.append((len(fs.ops), lsn, evs))

    _threads(8, work)
    j.close()
    assert len(segment_files(path)) >= 3
    assert any(len(f[3]) > 1 for f in frames(path)), "no frame held several commits"
    for k in range(len(fs.ops) + 1):
        img = fs.crash_image(str(fast_tmp / f"img{k}"), upto=k)
        if not segment_files(img):  # before the first segment was durable
            assert not any(n <= k for n, _, _ in acks)
            continue
        with Journal.open(img, segment_bytes=4096) as j2:
            records = list(Reader(img).records())
            disk = fold_records(records)
            assert_journal_matches(j2, disk)
        for n, lsn, evs in acks:
            if n <= k:
                got = [("taken", e[1], "loader") if e[0] == "taken" and e[2] is not None else e
                       for e in events_of(records[lsn - 1].commit)]
                assert got == evs, (k, lsn)


class _CountingLock:
    """The journal's RLock, counting how often a sleeping committer takes it back."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.restores = 0

    def acquire(self, *args):
        return self._lock.acquire(*args)

    def release(self) -> None:
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()

    def _release_save(self):
        return self._lock._release_save()

    def _acquire_restore(self, saved) -> None:
        self.restores += 1
        self._lock._acquire_restore(saved)


def test_committers_woken_by_their_durable_batch_do_not_take_the_journal_lock_again(fast_tmp):
    """Eight committers queue behind a held fsync; the batch that makes their commits durable
    wakes them, and they return without taking the journal lock again (at most the one handed
    the lead takes it): every extra take was a wake-up and a wait on a contended lock per commit."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs)
    gids = j.taken([GroupRef(idx=i) for i in range(9)])
    j._lock = _CountingLock()
    j._cond = threading.Condition(j._lock)
    held, gate = fs.hold_segment_fsyncs()
    first = threading.Thread(target=j.admitted, args=([gids[0]],), kwargs={"target_step": 1})
    first.start()
    assert held.wait(10)
    queued = [threading.Thread(target=j.admitted, args=([g],), kwargs={"target_step": 1})
              for g in gids[1:]]
    for t in queued:
        t.start()
    deadline = time.monotonic() + 10
    while len(j._pending) < len(queued) and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)  # every queued committer asleep on its own lock
    gate.set()
    for t in [first] + queued:
        t.join(10)
    assert j.lsn == 10 and Reader(path).fold().lsn == 10
    assert j._lock.restores <= 1, f"{j._lock.restores} woken committers took the lock back"
    j.close()
