"""Test 5: fault injection through the I/O seam (tests/support/faultfs.py).

A failed write or fsync makes that call and every later one raise JournalFailed (even
reads), with no further I/O (no retried fsync); the failed commit is not in the writer's
state and never becomes visible unless its bytes really reached the file; reopening
shows exactly what is on disk. Also: crash images taken after every recorded operation
(power loss and process crash) reopen to a state holding every acknowledged commit.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time

import pytest

from tests.support.faultfs import FaultFS
from journal import (CheckpointCommitted, GroupRef, Journal, JournalFailed, JournalIOError, Owner, Reader,
                     ResumePlan)
from tests.support.journal_model import (Model, append_and_verify, assert_journal_matches,
                                         assert_state_matches, drive, fold_records, segment_files, step)


def every_call(j, m: Model):
    """Every public entry point of a Journal, reads included (each must raise JournalFailed)."""
    live = sorted(m.live())
    g = live[0] if live else 0
    return {
        "owner_of": lambda: j.owner_of(g),
        "lsn": lambda: j.lsn,
        "counts": j.counts,
        "groups": j.groups,
        "state_copy": j.state_copy,
        "loader_state": j.loader_state,
        "flush": j.flush,
        "taken": lambda: j.taken([GroupRef(idx=1)]),
        "diverted": lambda: j.diverted([g]),
        "admitted": lambda: j.admitted([g], target_step=1),
        "finished": lambda: j.finished([g]),
        "trained": lambda: j.trained([g], step=1),
        "discarded": lambda: j.discarded([g], reason="x"),
        "begin_checkpoint": lambda: j.begin_checkpoint(step=99),
        "commit_checkpoint": lambda: j.commit_checkpoint(step=99),
        "transaction": lambda: j.transaction().__enter__(),
    }


def assert_fail_stop(j, fs: FaultFS, m: Model, failed_at: int) -> None:
    """After the failing op (index `failed_at` in fs.ops): every call raises JournalFailed, the
    in-memory state is `m` (the failed commit was taken back), and no I/O but closes follows."""
    for name, call in every_call(j, m).items():
        try:
            call()
        except JournalFailed:
            continue
        pytest.fail(f"{name}() after a failed write/fsync did not raise JournalFailed")
    # white-box: the failed commit is not in the writer's state
    assert j._state.lsn == m.lsn and j._state.next_group_id == m.next_gid
    j.close()
    j.close()
    later = fs.ops[failed_at + 1:]
    assert all(o.kind == "close" for o in later), [(o.kind, o.path) for o in later]


def reopen_matches_disk(path: str, m: Model, failed: list[tuple] | None) -> Model:
    """Reopen with the real file system: the state is the fold of what is on disk, which is
    `m`, or `m` plus the failed commit when its bytes did reach the file."""
    with Journal.open(path, segment_bytes=4096) as j:
        disk = fold_records(Reader(path).records())
        assert_journal_matches(j, disk)
    allowed = [m.owners] + ([m.commit(failed).owners] if failed is not None else [])
    assert disk.owners in allowed
    return disk


@pytest.fixture
def journal_with_fs(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path, prepared=False)  # the prepared next segment: test_prealloc.py
    j = Journal.open(path, fs=fs, segment_bytes=4096)
    m = drive(j, Model(), random.Random(7), 30)
    yield path, fs, j, m
    j.close()


def test_fsync_eio_once_fails_now_and_forever(journal_with_fs, fast_tmp):
    path, fs, j, m = journal_with_fs
    fault = fs.inject("fsync", nth=1, error=errno.EIO)  # once: a retry would succeed
    n = len(fs.ops)
    with pytest.raises(JournalFailed):
        j.taken([GroupRef(idx=5), GroupRef(idx=6)])
    assert fault.fired == 1
    (failed,) = [i for i, o in enumerate(fs.ops) if o.failed]
    assert failed >= n and fs.ops[failed].kind == "fsync"
    assert_fail_stop(j, fs, m, failed)
    assert fs.count("fsync", failed=False) == len([o for o in fs.ops[:n] if o.kind == "fsync"])
    # power loss now: the failed commit was never durable
    img = fs.crash_image(str(fast_tmp / "img"))
    with Journal.open(img) as j2:
        assert_journal_matches(j2, m)
    # the real directory: its bytes did reach the page cache, so reopening shows it
    disk = reopen_matches_disk(path, m, [("taken", [m.next_gid, m.next_gid + 1], None)])
    assert disk.lsn == m.lsn + 1
    append_and_verify(path, disk)


def test_concurrent_committers_all_fail(journal_with_fs, fast_tmp):
    """The leader's fsync fails while other threads wait on the same group commit: every one
    of them gets JournalFailed, none of their commits stays in memory."""
    path, fs, j, m = journal_with_fs
    gate = threading.Event()
    fs.on("fsync", lambda kind, p: gate.wait(0.05))  # widen the window for others to queue
    fs.inject("fsync", nth=1, error=errno.EIO)
    errors: list = []

    def worker(i):
        try:
            j.taken([GroupRef(idx=100 + i)])
        except Exception as e:  # noqa: BLE001 - collected and checked below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 6 and all(isinstance(e, JournalFailed) for e in errors), errors
    (failed,) = [i for i, o in enumerate(fs.ops) if o.failed]
    assert_fail_stop(j, fs, m, failed)
    img = fs.crash_image(str(fast_tmp / "img"))
    with Journal.open(img) as j2:
        assert_journal_matches(j2, m)
    with Journal.open(path) as j3:
        disk = fold_records(Reader(path).records())
        assert_journal_matches(j3, disk)
        assert m.lsn <= disk.lsn <= m.lsn + 6


@pytest.mark.parametrize("short", [0, 1, 11, 12, 30])
def test_enospc_short_write_during_append(journal_with_fs, fast_tmp, short):
    path, fs, j, m = journal_with_fs
    fs.inject("write", nth=1, error=errno.ENOSPC, short=short)
    with pytest.raises(JournalFailed):
        j.taken([GroupRef(idx=5)], loader_state={"n": 1})
    (failed,) = [i for i, o in enumerate(fs.ops) if o.failed]
    assert len(fs.ops[failed].data) == short
    assert_fail_stop(j, fs, m, failed)
    img = fs.crash_image(str(fast_tmp / "img"))
    with Journal.open(img) as j2:
        assert_journal_matches(j2, m)
    disk = reopen_matches_disk(path, m, None)  # a partial frame is a torn tail: cut off
    assert disk.lsn == m.lsn
    torn = os.path.join(path, "torn")
    if short:
        (name,) = os.listdir(torn)
        with open(os.path.join(torn, name), "rb") as fh:
            assert fh.read() == fs.ops[failed].data.rstrip(b"\0")  # the zeros after: preallocated
    append_and_verify(path, m)


def test_persistent_enospc(journal_with_fs):
    path, fs, j, m = journal_with_fs
    fs.inject("write", nth=1, error=errno.ENOSPC, persistent=True)
    with pytest.raises(JournalFailed):
        j.taken([GroupRef(idx=5)])
    (failed,) = [i for i, o in enumerate(fs.ops) if o.failed]
    assert_fail_stop(j, fs, m, failed)
    disk = reopen_matches_disk(path, m, None)
    append_and_verify(path, disk)


def arm_on_new_segment(fs: FaultFS, kind: str, **kw):
    """Arm a fault on the next `kind` op touching the segment being created (from a hook,
    because its name is only known when the rotation happens)."""
    def hook(_kind, p):
        if p.endswith(".wal") and not fs.faults:
            fs.inject(kind, path_contains=os.path.basename(p), **kw)
    fs.on("create", hook)


def seal_hook(fs: FaultFS):
    """Fail the fsync that seals the old segment: the only fsync of a path that directly
    follows another fsync of the same path (every commit is a write, then an fsync)."""
    def hook(_kind, p):
        last = fs.ops[-1] if fs.ops else None
        if last is not None and last.kind == "fsync" and last.path == p and not fs.faults:
            fs.inject("fsync", nth=1, error=errno.EIO)  # armed from the hook: fails this op
    return hook


ROTATION_FAULTS = {
    "create-enospc": lambda fs: fs.inject("create", path_contains=".wal", error=errno.ENOSPC),
    "header-short-write": lambda fs: arm_on_new_segment(fs, "write", nth=1, error=errno.ENOSPC, short=20),
    "header-write-enospc": lambda fs: arm_on_new_segment(fs, "write", nth=1, error=errno.ENOSPC),
    "header-fsync-eio": lambda fs: arm_on_new_segment(fs, "fsync", nth=1, error=errno.EIO),
    "dir-fsync-eio": lambda fs: fs.inject("fsync_dir", error=errno.EIO),
    "first-frame-short-write": lambda fs: arm_on_new_segment(fs, "write", nth=2, error=errno.ENOSPC, short=7),
    "seal-fsync-eio": lambda fs: fs.on("fsync", seal_hook(fs)),
}


@pytest.mark.parametrize("where", sorted(ROTATION_FAULTS))
def test_fault_during_segment_rotation(fast_tmp, where):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path, prepared=False)  # the prepared next segment: test_prealloc.py
    j = Journal.open(path, fs=fs, segment_bytes=4096)
    rng = random.Random(8)
    m = drive(j, Model(), rng, 5)
    ROTATION_FAULTS[where](fs)
    segs = len(segment_files(path))
    history = [m]
    failed_call = False
    for _ in range(400):
        try:
            m = step(j, m, rng, loader_every=3)
        except JournalFailed:
            failed_call = True
            break
        history.append(m)
    assert failed_call, "no rotation happened"
    (failed,) = [i for i, o in enumerate(fs.ops) if o.failed]
    assert_fail_stop(j, fs, m, failed)
    img = fs.crash_image(str(fast_tmp / "img"))
    with Journal.open(img, segment_bytes=4096) as j2:
        assert_journal_matches(j2, m)
    disk = reopen_matches_disk(path, m, None)
    assert disk.lsn == m.lsn  # the failed commit is never visible
    assert len(segment_files(path)) in (segs + 0, segs + 1)
    append_and_verify(path, m)


# -- crash images after every operation --------------------------------------------------------


def recorded_workload(path: str, n: int, seed: int):
    """Run `n` random calls with a recording fs; returns (fs, acks) where acks[i] is
    (number of ops when call i returned, model after it)."""
    fs = FaultFS(root=path, prepared=False)  # the prepared next segment: test_prealloc.py
    acks = []
    with Journal.open(path, fs=fs, segment_bytes=4096) as j:
        m = Model()
        rng = random.Random(seed)
        for _ in range(n):
            m = step(j, m, rng, loader_every=2, loader_bytes=700, fingerprint_bytes=120)
            acks.append((len(fs.ops), m))
    return fs, acks


@pytest.mark.parametrize("mode", ["durable", "volatile"])
def test_crash_image_after_every_operation(fast_tmp, mode):
    path = str(fast_tmp / "j")
    fs, acks = recorded_workload(path, 40, seed=9)
    assert len(segment_files(path)) >= 3
    history = {0: Model()} | {m.lsn: m for _, m in acks}
    for k in range(len(fs.ops) + 1):
        img = fs.crash_image(str(fast_tmp / f"img{k}"), upto=k, mode=mode)
        acked = max([m.lsn for n, m in acks if n <= k], default=0)
        with Journal.open(img, segment_bytes=4096) as j:
            assert acked <= j.lsn <= acked + 1, (k, fs.ops[k - 1] if k else None)
            assert_journal_matches(j, history[j.lsn])
        r = Reader(img)
        assert_state_matches(r.fold(), history[j.lsn])
        assert all(p.kind == "torn" for p in r.problems)


def test_crash_images_during_torn_tail_repair(fast_tmp):
    """A crash at any point of the open that cuts a torn tail leaves a journal that still
    opens to the same state (the cut is copied aside before the truncation)."""
    path = str(fast_tmp / "j")
    with Journal.open(path, segment_bytes=4096) as j:
        m = drive(j, Model(), random.Random(10), 20)
    (seg,) = segment_files(path)[-1:]
    with open(os.path.join(path, seg), "ab") as fh:
        fh.write(b"\x05" * 40)
    fs = FaultFS(root=path)
    with Journal.open(path, fs=fs, segment_bytes=4096) as j:
        assert_journal_matches(j, m)
    kinds = [o.kind for o in fs.ops]
    assert "truncate" in kinds
    for mode in ("durable", "volatile"):
        for k in range(len(fs.ops) + 1):
            img = fs.crash_image(str(fast_tmp / f"{mode}{k}"), upto=k, mode=mode)
            with Journal.open(img, segment_bytes=4096) as j:
                assert_journal_matches(j, m)
            append_and_verify(img, m)


def test_owner_enum_is_what_calls_return(journal_with_fs):
    path, fs, j, m = journal_with_fs
    for g, o in m.owners.items():
        assert isinstance(j.owner_of(g), Owner) and j.owner_of(g) is o


def test_background_fsync_failure_in_batch_mode(fast_tmp):
    """sync="batch": commits return before their fsync; when the background fsync fails the
    journal is failed for every later call, and a reopen shows what is on disk."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs, sync="batch", sync_interval=0.001)
    m = drive(j, Model(), random.Random(15), 10)
    j.flush()
    fault = fs.inject("fsync", nth=1, error=errno.EIO)
    m2 = step(j, m, random.Random(16))  # returns before its fsync
    deadline = time.monotonic() + 60  # waits for the background thread; not a timing check
    while fault.fired == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert fault.fired == 1
    (failed,) = [i for i, o in enumerate(fs.ops) if o.failed]
    for name, call in every_call(j, m2).items():
        with pytest.raises(JournalFailed):
            call()
    j.close()
    assert all(o.kind == "close" for o in fs.ops[failed + 1:])
    img = fs.crash_image(str(fast_tmp / "img"))
    with Journal.open(img) as j2:
        assert_journal_matches(j2, m)  # the unsynced commit did not survive the power loss
    with Journal.open(path) as j3:
        assert_journal_matches(j3, m2)  # but it is in the file


@pytest.mark.parametrize("kind", ["write", "fsync", "truncate", "fsync_dir", "create", "mkdir"])
def test_fault_while_open_repairs_a_torn_tail(fast_tmp, kind):
    """An I/O error while open copies a torn tail aside and cuts it: the open raises, nothing
    acknowledged is lost, and the next open (without faults) repairs and continues."""
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        m = drive(j, Model(), random.Random(17), 12)
    (seg,) = segment_files(path)
    with open(os.path.join(path, seg), "ab") as fh:
        fh.write(b"\x07" * 33)
    fs = FaultFS(root=path)
    fs.inject(kind, nth=1, error=errno.EIO)
    with pytest.raises(JournalIOError) as info:
        Journal.open(path, fs=fs)
    assert info.value.errno == errno.EIO and info.value.path and info.value.operation
    assert fs.count(kind, failed=True) == 1
    torn = os.path.join(path, "torn")
    copies = [open(os.path.join(torn, n), "rb").read() for n in os.listdir(torn)] if os.path.isdir(torn) else []
    assert copies in ([], [b"\x07" * 33])  # no partial copy is left
    with Journal.open(path) as j:  # the lock was released, the repair happens now
        assert_journal_matches(j, m)
    append_and_verify(path, m)


def test_a_flush_waiting_on_a_failing_fsync_does_not_fsync_again_and_succeed(tmp_path):
    """Fail-stop across concurrent flushes: the second flush() waited for the first, whose
    fsync failed; it must raise JournalFailed, not fsync again and return normally."""
    import threading
    import time

    from journal import JournalFailed
    from journal.vfs import OsFileSystem

    gate, entered = threading.Event(), threading.Event()

    class BlockingFailingFsync(OsFileSystem):
        armed = False
        fsyncs_after_failure = 0

        def fsync(self, f):
            if self.armed and f.path.endswith(".wal"):
                if entered.is_set():
                    self.fsyncs_after_failure += 1
                entered.set()
                gate.wait(5)
                raise OSError(errno.EIO, "injected")
            return super().fsync(f)

    fs = BlockingFailingFsync()
    j = Journal.open(str(tmp_path / "j"), sync="batch", sync_interval=3600, fs=fs)
    j.taken([GroupRef(1)])
    fs.armed = True
    outcome = {}

    def flush(name):
        try:
            j.flush()
            outcome[name] = "returned"
        except JournalFailed:
            outcome[name] = "JournalFailed"

    first = threading.Thread(target=flush, args=("first",))
    first.start()
    assert entered.wait(5)
    second = threading.Thread(target=flush, args=("second",))
    second.start()
    time.sleep(0.2)
    gate.set()
    first.join(5)
    second.join(5)
    assert outcome == {"first": "JournalFailed", "second": "JournalFailed"}
    assert fs.fsyncs_after_failure == 0


def test_a_failed_open_leaves_no_file_open(fast_tmp):
    """Journal.open fails after it opened the last segment (its first append during a resume
    hits ENOSPC): the segment's descriptor is closed along with the lock, nothing leaks."""
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        gids = j.taken([GroupRef(1), GroupRef(2)])
        j.admitted(gids, target_step=1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        j.taken([GroupRef(3)])  # a dead tail: the resume branches and writes its first commit
    at_checkpoint = Reader(path).fold(stop_lsn=3)

    plan = ResumePlan(fold_state=at_checkpoint, first_commit=[CheckpointCommitted(1)])

    def open_fds() -> set[str]:
        return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")}

    before = open_fds()
    fs = FaultFS(root=path)
    fs.inject("write", nth=2, error=errno.ENOSPC, persistent=True)
    with pytest.raises((OSError, JournalFailed)):
        Journal.open(path, resume=plan, fs=fs)
    leaked = {p for p in open_fds() - before if p.startswith(path)}
    assert not leaked, leaked
    with Journal.open(path) as j:  # the lock was released too
        assert j.lsn == 5
