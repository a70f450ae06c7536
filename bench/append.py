"""`python -m bench append`: how fast `journal.Journal` makes ownership events durable, and how big they are.

Vocabulary used by every figure:

* **event**: one event record naming one group (e.g. `admitted([g])`); a
  checkpoint marker names none. Multi-group events (`taken` of 64 refs) are
  reported separately as **group-transitions/s** (64 per event).
* **commit**: one atomic append (one LSN). The throughput workloads commit
  one event per call, cycling each group through its life: `taken` ->
  `admitted` -> `finished` (with a data-plane locator) -> `trained`.
* **durable**: the call returned under `sync="always"`, i.e. after the fsync.

Figures, each beside a reference measured in the same run, in interleaved
rounds (medians over rounds; see `bench.common`):

1. limit: one-event commits, 1 thread, `sync="always"` vs two raw loops of the
   journal's average frame size, in the same directory: `os.write` + `os.fdatasync`
   appending to a growing file (target >= 1.0x), and `os.pwrite` + `os.fdatasync`
   overwriting a file preallocated, zero-filled and fsynced beforehand, the way the
   journal writes its segments (target >= 0.85x).
2. group commit: 8 producer threads, `sync="always"`, beside the 1-thread figure;
   target >= 3x (synchronous producers share an fsync about 4.5 at a time:
   docs/benchmarks.md). Beside it the raw overwrite loop run by 2 and by 8 threads
   at once (as many fdatasyncs in flight): what overlapping fsyncs gain on this
   disk, and its rate with 8 writers of one commit per fdatasync.
3. peer: stdlib sqlite3 (WAL, `synchronous=FULL`), the same events as rows,
   one `BEGIN IMMEDIATE` transaction per commit, each thread its own
   connection (sqlite serialises writers), at 1 and at 8 threads; no target
   (one fdatasync per commit bounds both peers: docs/benchmarks.md); sqlite
   beside the raw overwrite loops too. These rows show the round whose ratio is
   the median of the per-round ratios.

The four 1-thread measurements (both raw loops, journal, sqlite) run in alternating
0.25 s slices, so a load change on the shared machine hits them alike; the four
8-thread ones (journal, sqlite, raw loop with 2 and 8 threads) run back to back in each
round, in an order that rotates from round to round.
4. bulk append, `sync="none"`: transactions of 64 one-group events. Target
   >= 0.4x the floor below. Also one-event commits and 64-group events
   (group-transitions/s), informational; their reference is the floor of
   msgspec-encoding the same `Commit`s, checksumming and `os.write`-ing them.
5. `AsyncJournal` with 256 coroutines, one-event commits, `sync="always"`: target >=
   100,000 durable events/s, and the event loop's longest stall <= 5 ms (beside it, the
   longest garbage-collector pause meanwhile and how many full collections ran).
6. the commit path's CPU per commit, stage by stage (`bench.commit_cost`), and the CPU,
   system time and context switches per commit of the 8-thread run; and a `rollout_progress`
   commit's CPU and bytes beside a `rollout_sealed` one's (target: no more than a seal).
7. bytes per event on a trainer-like mix, without and with a real
   `StatefulDataLoader(shuffle=True).state_dict()` on every `taken`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import pickle
import random
import sqlite3
import statistics
import time
import zlib

import msgspec

from journal import (Admitted, AsyncJournal, Commit, Finished, GroupRef, Journal, Reader, Taken,
                     TakenGroup, Trained)
from journal.vfs import OsFileSystem
from journal.reader import list_segments

from . import commit_cost
from .common import (Figure, Report, Rounds, Target, log, scratch_dir, timed_alternating, timed_loop,
                     timed_threads)

TASK = "math"
BULK_EVENTS = 64      # one-group events per bulk transaction
MULTI_GROUPS = 64     # groups per multi-group event
THREADS = 8
ASYNC_COROUTINES = 256
BULK_TARGET = 0.4           # bulk appends against the encode+write floor
GROUP_COMMIT_TARGET = 3.0   # 8 threads against 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds per measurement (default 0.4 quick, 2 full)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds, medians reported (default 2 quick, 5 full)")
    parser.add_argument("--threads", type=int, default=THREADS, help="producer threads (default 8)")


# -- workloads ---------------------------------------------------------------------------------

class CountingFS(OsFileSystem):
    """The real file system, counting fsyncs (to report commits per fsync under group commit)."""

    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, f) -> None:
        self.fsyncs += 1
        super().fsync(f)


def lifecycle(j: Journal, first_idx: int):
    """A body for `timed_loop`: one group through taken/admitted/finished/trained, one event per commit."""
    idx = itertools.count(first_idx)

    def body() -> int:
        n = next(idx)
        (g,) = j.taken([GroupRef(idx=n, task_name=TASK, epoch=0)])
        j.admitted([g], target_step=1, policy_version=1)
        j.finished([g], policy_version=1, locators=[f"replay/{n:08d}"])
        j.trained([g], step=1)
        return 4
    return body


def bulk_transactions(j: Journal):
    """Transactions of BULK_EVENTS one-group events (BULK_EVENTS/4 groups through their life)."""
    idx = itertools.count()

    def body() -> int:
        with j.transaction() as tx:
            for _ in range(BULK_EVENTS // 4):
                n = next(idx)
                (g,) = tx.taken([GroupRef(idx=n, task_name=TASK, epoch=0)])
                tx.admitted([g], target_step=1, policy_version=1)
                tx.finished([g], policy_version=1, locators=[f"replay/{n:08d}"])
                tx.trained([g], step=1)
        return BULK_EVENTS
    return body


def multi_group(j: Journal):
    """Four one-event commits, each event naming MULTI_GROUPS groups; counts group-transitions."""
    idx = itertools.count(step=MULTI_GROUPS)

    def body() -> int:
        n = next(idx)
        gs = j.taken([GroupRef(idx=n + i, task_name=TASK, epoch=0) for i in range(MULTI_GROUPS)])
        j.admitted(gs, target_step=1, policy_version=1)
        j.finished(gs, policy_version=1, locators=[f"replay/{n + i:08d}" for i in range(MULTI_GROUPS)])
        j.trained(gs, step=1)
        return 4 * MULTI_GROUPS
    return body


def raw_floor(fd: int, events_per_commit: int, groups_per_event: int):
    """The same Commits as the journal workloads, msgspec-encoded, CRC'd and os.write-n: no fold,
    no lock, no chain. The floor a sync="none" append cannot beat in this process."""
    enc = msgspec.msgpack.Encoder()
    lsn = itertools.count(1)
    gid = itertools.count()
    k = groups_per_event
    lives = 1 if events_per_commit == 1 else events_per_commit // 4  # groups' lives per body call

    def write(events: list) -> None:
        payload = enc.encode(Commit(next(lsn), events))
        os.write(fd, zlib.crc32(payload).to_bytes(4, "little") + payload)

    def body() -> int:
        batch = []
        for _ in range(lives):
            gs = [next(gid) for _ in range(k)]
            batch += [Taken([TakenGroup(g, g, TASK, 0) for g in gs]), Admitted(gs, 1, 1),
                      Finished(gs, 1, [f"replay/{g:08d}" for g in gs]), Trained(gs, 1)]
        if events_per_commit == 1:
            for ev in batch:
                write([ev])
        else:
            write(batch)
        return 4 * lives * k
    return body


def raw_fsync_loop(fd: int, frame: bytes):
    def body() -> int:
        os.write(fd, frame)
        os.fdatasync(fd)
        return 1
    return body


PREALLOCATED_BYTES = 64 << 20  # the raw overwrite loop's file: one default segment


def preallocated_file(path: str, size: int = PREALLOCATED_BYTES) -> int:
    """A descriptor of `path` created `size` bytes long, zero-filled and fsynced (file and
    directory): what the journal makes of a segment before frames overwrite it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    zeros = bytes(1 << 20)
    for off in range(0, size, len(zeros)):
        os.pwrite(fd, zeros, off)
    os.fsync(fd)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return fd


def raw_overwrite_loop(fd: int, frame: bytes, size: int = PREALLOCATED_BYTES):
    """os.pwrite + os.fdatasync of `frame` at consecutive offsets of a preallocated file (from
    its start again at its end): no write changes the file's size or extents."""
    offset = 0

    def body() -> int:
        nonlocal offset
        if offset + len(frame) > size:
            offset = 0
        os.pwrite(fd, frame, offset)
        os.fdatasync(fd)
        offset += len(frame)
        return 1
    return body


def raw_overwrite_threads(fd: int, frame: bytes, size: int = PREALLOCATED_BYTES):
    """`make_body` for `timed_threads`: each thread `os.pwrite`s `frame` at the next free offset
    of a preallocated file and `os.fdatasync`s it, so as many fdatasyncs overlap as there are
    threads: what the disk gives concurrent fsyncs, one commit each."""
    offsets = itertools.count(0, len(frame))  # next() of a count is atomic under the GIL
    slots = (size - len(frame)) // len(frame)

    def make_body(_: int):
        def body() -> int:
            os.pwrite(fd, frame, next(offsets) % slots * len(frame))
            os.fdatasync(fd)
            return 1
        return body
    return make_body


SQL_SCHEMA = """CREATE TABLE IF NOT EXISTS events (
    lsn INTEGER PRIMARY KEY, kind TEXT NOT NULL, group_id INTEGER NOT NULL, idx INTEGER,
    task_name TEXT, epoch INTEGER, step INTEGER, policy_version INTEGER, locator TEXT)"""
SQL_INSERT = ("INSERT INTO events (kind, group_id, idx, task_name, epoch, step, policy_version, locator) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=300, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def sqlite_lifecycle(conn: sqlite3.Connection, gids, first_idx: int):
    """The journal's lifecycle as rows: one BEGIN IMMEDIATE ... COMMIT per event."""
    idx = itertools.count(first_idx)
    ex = conn.execute

    def commit(row) -> None:
        ex("BEGIN IMMEDIATE")
        try:
            ex(SQL_INSERT, row)
        except BaseException:
            ex("ROLLBACK")
            raise
        ex("COMMIT")

    def body() -> int:
        n = next(idx)
        g = next(gids)
        commit(("taken", g, n, TASK, 0, None, None, None))
        commit(("admitted", g, None, None, None, 1, 1, None))
        commit(("finished", g, None, None, None, None, 1, f"replay/{n:08d}"))
        commit(("trained", g, None, None, None, 1, None, None))
        return 4
    return body


# -- measurements ------------------------------------------------------------------------------

class GcPauses:
    """The longest pause of the cyclic garbage collector while in use (a full collection walks
    every object of the process, whoever allocated it), in ms, and how many full collections ran."""

    def __init__(self) -> None:
        self.longest_ms, self._start, self.full = 0.0, 0.0, 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.longest_ms = max(self.longest_ms, (time.perf_counter() - self._start) * 1e3)
            self.full += info["generation"] == 2

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def measure_async(parent: str, coroutines: int, seconds: float) -> dict[str, float]:
    """Of `coroutines` coroutines, each committing one-event commits through `AsyncJournal`
    (group lifecycles, sync="always") while a ticker coroutine measures how late the loop runs
    it: durable events/s ("rate"), the longest event-loop stall and the 99th percentile ("stall",
    "stall_p99", ms), the CPU the loop's thread and the whole process used during the longest
    stall ("stall_loop_cpu", "stall_process_cpu", ms: what of the stall was the loop's own
    work, and what no thread of the process ran at all), the longest garbage-collector pause
    ("gc", ms) and the full collections ("full")."""
    with scratch_dir(parent, "async-") as d, GcPauses() as pauses:
        j = Journal.open(d, sync="always")
        aj = AsyncJournal(j)
        commits, stalls, worst = 0, [], (0.0, 0.0, 0.0)

        async def producer(k: int) -> None:
            nonlocal commits
            idx = k * 1_000_000
            while time.perf_counter() < end:
                (g,) = await aj.taken([GroupRef(idx=idx, task_name=TASK)])
                await aj.admitted([g], target_step=1, policy_version=0)
                await aj.finished([g], policy_version=0, locators=[f"tq/{g}"])
                await aj.trained([g], step=1)
                commits += 4
                idx += 1

        async def ticker() -> None:
            nonlocal worst
            while time.perf_counter() < end:
                t, loop_cpu, process_cpu = time.perf_counter(), time.thread_time(), time.process_time()
                await asyncio.sleep(0.001)
                stall = time.perf_counter() - t - 0.001
                stalls.append(stall)
                if stall > worst[0]:
                    worst = (stall, time.thread_time() - loop_cpu, time.process_time() - process_cpu)

        async def main() -> float:
            nonlocal end
            start = time.perf_counter()
            end = start + seconds
            await asyncio.gather(ticker(), *[producer(k) for k in range(coroutines)])
            return time.perf_counter() - start

        end = 0.0
        elapsed = asyncio.run(main())
        j.close()
    stalls.sort()
    return {"rate": commits / elapsed, "stall": worst[0] * 1e3, "stall_loop_cpu": worst[1] * 1e3,
            "stall_process_cpu": worst[2] * 1e3, "stall_p99": stalls[int(0.99 * (len(stalls) - 1))] * 1e3,
            "gc": pauses.longest_ms, "full": pauses.full}


def journal_bytes(path: str) -> int:
    return sum(seg.size for seg in list_segments(path))


def average_frame_size(parent: str) -> float:
    """Bytes the journal appends per one-event commit of the lifecycle workload."""
    with scratch_dir(parent, "frame-") as d:
        path = os.path.join(d, "j")
        with Journal.open(path, sync="none") as j:
            body = lifecycle(j, 0)
            for _ in range(500):
                body()
            before_bytes, before_lsn = journal_bytes(path), j.lsn
            for _ in range(2000):
                body()
            return (journal_bytes(path) - before_bytes) / (j.lsn - before_lsn)


def measure_one_thread(parent: str, frame: bytes, seconds: float) -> dict[str, float]:
    """One thread, durable one-event commits: the raw fdatasync loops appending ("limit") and
    overwriting a preallocated file ("prealloc"), the journal with sync="always" ("journal") and
    sqlite ("sqlite"), in alternating 0.25 s slices in the same directory, so load changes on a
    shared machine hit all four alike."""
    with scratch_dir(parent, "one-thread-") as d:
        fd = os.open(os.path.join(d, "raw.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        pre = preallocated_file(os.path.join(d, "raw-prealloc.log"))
        conn = sqlite_connect(os.path.join(d, "events.db"))
        try:
            conn.execute(SQL_SCHEMA)
            with Journal.open(os.path.join(d, "j"), sync="always") as j:
                return timed_alternating({"limit": raw_fsync_loop(fd, frame),
                                          "prealloc": raw_overwrite_loop(pre, frame),
                                          "journal": lifecycle(j, 0),
                                          "sqlite": sqlite_lifecycle(conn, itertools.count(), 0)},
                                         seconds)
        finally:
            conn.close()
            os.close(pre)
            os.close(fd)


def measure_journal(parent: str, sync: str, threads: int, seconds: float, workload=lifecycle,
                    fs: OsFileSystem | None = None) -> float:
    with scratch_dir(parent, "journal-") as d:
        with Journal.open(os.path.join(d, "j"), sync=sync, fs=fs) as j:
            if threads == 1:
                return timed_loop(workload(j, 0) if workload is lifecycle else workload(j), seconds)
            return timed_threads(lambda i: workload(j, i * 10_000_000), threads, seconds)


def measure_raw_threads(parent: str, frame: bytes, threads: int, seconds: float) -> float:
    """fdatasyncs per second of `threads` threads overwriting one preallocated file."""
    with scratch_dir(parent, "raw-threads-") as d:
        fd = preallocated_file(os.path.join(d, "raw-prealloc.log"))
        try:
            return timed_threads(raw_overwrite_threads(fd, frame), threads, seconds)
        finally:
            os.close(fd)


def measure_many_threads(parent: str, frame: bytes, threads: int, seconds: float, fs: OsFileSystem,
                         first: int) -> dict:
    """The many-thread measurements of one round, back to back, starting at index `first` of
    their list (rounds rotate it, so no one of them always runs first): the journal ("j8", with
    its CPU use per commit), sqlite with as many connections ("sq8"), and the raw overwrite loop
    with 2 threads ("raw2") and with `threads` threads ("raw8")."""
    out: dict = {}

    def journal() -> float:
        rate, out["usage"] = commit_cost.usage_per_commit(
            lambda: measure_journal(parent, "always", threads, seconds, fs=fs), seconds)
        return rate

    runs = {"j8": journal,
            "sq8": lambda: measure_sqlite(parent, threads, seconds),
            "raw2": lambda: measure_raw_threads(parent, frame, 2, seconds),
            "raw8": lambda: measure_raw_threads(parent, frame, threads, seconds)}
    names = list(runs)
    for k in range(len(names)):
        name = names[(first + k) % len(names)]
        out[name] = runs[name]()
    return out


def median_round(r: Rounds, name: str, label: str, unit: str, *, value: str, reference: str,
                 reference_label: str, target: Target | None = None, note: str = "") -> Figure:
    """A Figure of the round whose ratio value/reference is the median of the per-round ratios
    (the lower one of an even count): the value and its reference measured side by side in that
    round, so a load change between rounds moves both."""
    values, refs = r.samples[value], r.samples[reference]
    ratios = [v / ref if ref else 0.0 for v, ref in zip(values, refs)]
    i = ratios.index(statistics.median_low(ratios))
    spread = f"per-round ratios {min(ratios):.2f}-{max(ratios):.2f}x, the median round's shown"
    return Figure(name, label, values[i], unit, reference=refs[i], reference_label=reference_label,
                  target=target, note=f"{note}; {spread}" if note else spread,
                  samples=list(values), reference_samples=list(refs))


def measure_sqlite(parent: str, threads: int, seconds: float) -> float:
    with scratch_dir(parent, "sqlite-") as d:
        path = os.path.join(d, "events.db")
        setup = sqlite_connect(path)
        setup.execute(SQL_SCHEMA)
        conns = [sqlite_connect(path) for _ in range(threads)]
        gids = itertools.count()
        try:
            if threads == 1:
                return timed_loop(sqlite_lifecycle(conns[0], gids, 0), seconds)
            return timed_threads(lambda i: sqlite_lifecycle(conns[i], gids, i * 10_000_000),
                                 threads, seconds)
        finally:
            for c in conns + [setup]:
                c.close()


def measure_raw(parent: str, events_per_commit: int, groups_per_event: int, seconds: float) -> float:
    with scratch_dir(parent, "raw-") as d:
        fd = os.open(os.path.join(d, "raw.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            return timed_loop(raw_floor(fd, events_per_commit, groups_per_event), seconds)
        finally:
            os.close(fd)


# -- the trainer-like mix -----------------------------------------------------------------------

def trainer_mix(path: str, *, steps: int, groups_per_step: int, loader_rows: int | None,
                groups_per_event: int = 1, seed: int = 0) -> dict:
    """Run a trainer-like sequence of transitions on a fresh journal; return size statistics.

    Per step: take `groups_per_step` groups (one `taken` per loader batch of
    `groups_per_event` rows, carrying the loader's `state_dict()` if
    `loader_rows`), divert ~5% to the spare pool, admit the rest, fail ~2% of
    the rollouts (discarded + a spare admitted with `replaces=`, one
    transaction), finish the rest with a locator, train them; every 10 steps a
    checkpoint_begun/checkpoint_committed pair and expired spares discarded.
    """
    rng = random.Random(seed)
    loader = it = None
    epoch = 0
    naive_state_bytes = 0
    if loader_rows:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchdata.stateful_dataloader import StatefulDataLoader
            loader = StatefulDataLoader(list(range(loader_rows)), batch_size=groups_per_event,
                                        shuffle=True, drop_last=True,
                                        generator=__import__("torch").Generator().manual_seed(seed))
            it = iter(loader)
    counter = itertools.count()
    spares: list[int] = []
    k = groups_per_event

    def chunks(xs):
        return [xs[i:i + k] for i in range(0, len(xs), k)]

    with Journal.open(path, sync="none") as j:
        for step in range(steps):
            taken: list[int] = []
            for _ in range(groups_per_step // k):
                state = None
                if loader is not None:
                    try:
                        rows = next(it)
                    except StopIteration:
                        epoch += 1
                        it = iter(loader)
                        rows = next(it)
                    idxs = [int(r) for r in rows]
                    state = loader.state_dict()
                    naive_state_bytes += len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
                else:
                    idxs = [next(counter) for _ in range(k)]
                taken += j.taken([GroupRef(idx=i, task_name=TASK, epoch=epoch) for i in idxs],
                                 loader_state=state)
            work = []
            for g in taken:
                if rng.random() < 0.05:
                    j.diverted([g])
                    spares.append(g)
                else:
                    work.append(g)
            for gs in chunks(work):
                j.admitted(gs, target_step=step + 1, policy_version=step)
            done = []
            for g in work:
                if rng.random() < 0.02:
                    with j.transaction() as tx:
                        tx.discarded([g], reason="rollout_failed")
                        if spares:
                            s = spares.pop(0)
                            tx.admitted([s], target_step=step + 1, policy_version=step, replaces=g)
                            done.append(s)
                else:
                    done.append(g)
            for gs in chunks(done):
                j.finished(gs, policy_version=step,
                           locators=[f"replay/{step:06d}/{g:08d}" for g in gs])
            for gs in chunks(done):
                j.trained(gs, step=step + 1)
            if step % 10 == 9:
                j.begin_checkpoint(step=step + 1)
                j.commit_checkpoint(step=step + 1)
                if len(spares) > 8:
                    expired, spares[:] = spares[:-8], spares[-8:]
                    for gs in chunks(expired):
                        j.discarded(gs, reason="spare_expired")
    total = journal_bytes(path)
    enc = msgspec.msgpack.Encoder()
    events = commits = transitions = bare = taken_events = 0
    for rec in Reader(path).records():
        commits += 1
        for ev in rec.commit.events:
            events += 1
            groups = getattr(ev, "groups", None)
            transitions += len(groups) if groups is not None else 0
            if type(ev) is Taken:
                taken_events += 1
                ev = Taken(ev.groups)  # the bare event without its loader state
            bare += len(enc.encode(ev))
    return {"bytes": total, "events": events, "commits": commits, "group_transitions": transitions,
            "taken_events": taken_events, "bare_event_bytes": bare, "epochs": epoch + 1,
            "naive_state_bytes": naive_state_bytes}


def add_commit_cost(report: Report, r: Rounds, parent: str | None, threads: int, quick: bool) -> None:
    """The per-commit CPU rows: the commit path stage by stage on one thread (bench.commit_cost),
    and what a commit costs with `threads` threads under group commit."""
    lives = 5_000 if quick else 20_000
    log(f"commit path CPU breakdown: {4 * lives:,} one-event commits per pipeline")
    costs = commit_cost.breakdown(parent, lives)
    report.meta["commit_cpu_ns"] = costs
    for name in commit_cost.STAGES + ("rest",):
        label = "the journal's own (arguments, lock, queue, undo, batch)" if name == "rest" else name
        report.add(Figure(
            f"commit_cpu_{name.split()[0]}", f"commit CPU, 1 thread, sync=none: {label}", costs[name],
            "ns/commit", reference=costs["journal"], reference_label="the whole commit"))
    report.add(Figure(
        "commit_cpu_threads", f"{threads} threads, sync=always: CPU per commit", r.median("j8_cpu_us") * 1e3,
        "ns/commit", reference=costs["journal"], reference_label="1 thread, sync=none",
        note=f"user {r.median('j8_user_us'):.1f} us, system {r.median('j8_sys_us'):.1f} us (fdatasync, "
             f"futex wake-ups), {r.median('j8_switches'):.2f} voluntary context switches per commit "
             "(median round)"))
    commits = 20_000 if quick else 80_000
    log(f"progress commit vs seal commit: {commits:,} one-event commits each, best of {commit_cost.RUNS}")
    p = commit_cost.progress_vs_seal(parent, commits)
    report.meta["progress_vs_seal"] = p
    report.add(Figure(
        "progress_commit", "progress commit vs seal commit: CPU, 1 thread, sync=none", p["progress_ns"],
        "ns/commit", reference=p["seal_ns"], reference_label="a rollout_sealed commit",
        target=Target(max_ratio=1.0),
        note=f"rollout_progress of each rollout of groups admitted with rollouts={commit_cost.ROLLOUTS} "
             f"(locator, tokens, version) vs rollout_sealed of each (locator, version); frames "
             f"{p['progress_bytes']:.1f} B vs {p['seal_bytes']:.1f} B. Under sync=always both wait "
             "for the same fsync; target: a prefix costs no more than a seal"))


# -- the benchmark -----------------------------------------------------------------------------

def run(args) -> Report:
    quick = args.quick
    seconds = args.seconds or (0.4 if quick else 2.0)
    rounds = args.rounds or (2 if quick else 5)
    threads = args.threads
    parent = os.path.abspath(args.dir) if args.dir else None
    report = Report("append", quick=quick, directory=parent)
    if parent:
        os.makedirs(parent, exist_ok=True)

    frame_size = average_frame_size(parent)
    frame = b"\x5a" * round(frame_size)
    report.meta.update(seconds_per_measurement=seconds, rounds=rounds, threads=threads,
                       journal_frame_bytes=frame_size, limit_write_bytes=len(frame))
    log(f"bench append: {rounds} rounds x {seconds:g} s per measurement; journal frame "
        f"{frame_size:.1f} B per one-event commit, so the raw loop writes {len(frame)} B")

    r = Rounds()
    fs8 = CountingFS()
    fsyncs_8 = []
    for i in range(rounds):
        log(f"round {i + 1}/{rounds}")
        one = measure_one_thread(parent, frame, seconds)
        r.add("limit", one["limit"])
        r.add("prealloc", one["prealloc"])
        r.add("j1", one["journal"])
        r.add("sq1", one["sqlite"])
        before = fs8.fsyncs
        many = measure_many_threads(parent, frame, threads, seconds, fs8, first=i)
        for key in ("j8", "sq8", "raw2", "raw8"):
            r.add(key, many[key])
        for key, value in many["usage"].items():
            r.add(f"j8_{key}", value)
        fsyncs_8.append((fs8.fsyncs - before) / seconds)
        r.add("raw_bulk", measure_raw(parent, BULK_EVENTS, 1, seconds))
        r.add("bulk", measure_journal(parent, "none", 1, seconds, workload=bulk_transactions))
        r.add("raw_one", measure_raw(parent, 1, 1, seconds))
        r.add("one", measure_journal(parent, "none", 1, seconds))
        r.add("raw_multi", measure_raw(parent, 1, MULTI_GROUPS, seconds))
        r.add("multi", measure_journal(parent, "none", 1, seconds, workload=multi_group))
        a = measure_async(parent, ASYNC_COROUTINES, seconds)
        r.add("async_full_per_100k", a["full"] * 1e5 / (a["rate"] * seconds))
        r.add("async", a["rate"])
        for key in ("stall", "stall_p99", "stall_loop_cpu", "stall_process_cpu", "gc"):
            r.add(f"async_{key}", a[key])
        log(f"  limit {r.samples['limit'][-1]:,.0f}/s  prealloc {r.samples['prealloc'][-1]:,.0f}/s  journal 1t {r.samples['j1'][-1]:,.0f}/s  "
            f"{threads}t {many['j8']:,.0f}/s  sqlite 1t {r.samples['sq1'][-1]:,.0f}/s  "
            f"{threads}t {many['sq8']:,.0f}/s  raw 2t {many['raw2']:,.0f}/s  {threads}t {many['raw8']:,.0f}/s  "
            f"bulk {r.samples['bulk'][-1]:,.0f}/s")

    fsync_rate = sorted(fsyncs_8)[len(fsyncs_8) // 2]
    # one fsync in flight: it carries the producers queued while the one before it ran (about
    # half); two overlapping: each carries at most half of them, at the disk's 2-thread rate
    ceiling = threads / 2 * max(r.median("prealloc"), r.median("raw2"))
    report.meta.update(group_commit_fsyncs_per_s=fsyncs_8, group_commit_ceiling=ceiling)
    report.add(r.figure(
        "limit", "1 thread, one-event commits, sync=always", "commits/s", value="j1", reference="limit",
        reference_label=f"raw os.write+fdatasync of {len(frame)} B, appending",
        target=Target(min_ratio=1.0)))
    report.add(r.figure(
        "limit_prealloc", "1 thread, one-event commits, sync=always, vs overwriting a preallocated file",
        "commits/s", value="j1", reference="prealloc",
        reference_label=f"raw os.pwrite+fdatasync of {len(frame)} B over zeros",
        target=Target(min_ratio=0.85)))
    report.add(r.figure(
        "group_commit", f"{threads} threads, one-event commits, sync=always (group commit)",
        "events/s", value="j8", reference="j1", reference_label="1 thread",
        target=Target(min_ratio=GROUP_COMMIT_TARGET),
        note=f"{fsync_rate:,.0f} fsyncs/s, so {r.median('j8') / max(fsync_rate, 1):.1f} commits per "
             f"fsync (median round). An fsync covers only commits queued before it starts and each "
             f"producer waits for its own commit, so with one fsync in flight about {threads}/2 "
             f"producers share one, and with two overlapping each carries at most {threads}/2: "
             f"ceiling ~ {threads / 2:g} x the faster of the raw overwrite loop with 1 and 2 threads "
             f"= {ceiling:,.0f} events/s"))
    report.add(median_round(
        r, "raw_overlap", "raw os.pwrite+fdatasync over zeros, 2 threads (two fdatasyncs overlapping)",
        "fdatasyncs/s", value="raw2", reference="prealloc", reference_label="the same loop, 1 thread",
        note="what overlapping fsyncs (a second batch written and fsynced while one's fsync runs) "
             "can gain on this disk"))
    report.add(median_round(
        r, "group_commit_raw", f"{threads} threads, sync=always, vs {threads} raw loops", "events/s",
        value="j8", reference="raw8",
        reference_label=f"raw os.pwrite+fdatasync over zeros, {threads} threads, one commit per fdatasync"))
    report.add(median_round(
        r, "sqlite_1", "peer: 1 thread vs sqlite3 WAL synchronous=FULL", "events/s", value="j1",
        reference="sq1", reference_label="sqlite, 1 txn per event",
        note="journal and sqlite in alternating 0.25 s slices"))
    report.add(median_round(
        r, "sqlite_1_raw", "peer: sqlite3, 1 connection, vs the raw overwrite loop", "events/s",
        value="sq1", reference="prealloc", reference_label="raw os.pwrite+fdatasync over zeros, 1 thread",
        note="where the disk's limit is for both peers (alternating slices)"))
    report.add(median_round(
        r, "sqlite_8", f"peer: {threads} threads vs sqlite3 WAL synchronous=FULL", "events/s", value="j8",
        reference="sq8", reference_label=f"sqlite, {threads} connections",
        note="measured back to back in each round, the order rotating between rounds"))
    report.add(median_round(
        r, "sqlite_8_raw", f"peer: sqlite3, {threads} connections, vs {threads} raw loops", "events/s",
        value="sq8", reference="raw8", reference_label=f"raw os.pwrite+fdatasync over zeros, {threads} threads"))
    report.add(r.figure(
        "bulk", f"bulk append, sync=none, transactions of {BULK_EVENTS} one-group events", "events/s",
        value="bulk", reference="raw_bulk", reference_label="encode+write floor",
        target=Target(min_ratio=BULK_TARGET),
        note="the floor encodes, checksums and writes the same commits, with no check, fold or "
             "transaction; 1,000,000 events/s, the figure's earlier target, needs the floor at "
             f"{1_000_000 / BULK_TARGET:,.0f}/s"))
    report.add(r.figure(
        "one_event_none", "one-event commits, sync=none, 1 thread", "events/s", value="one",
        reference="raw_one", reference_label="encode+write floor"))
    report.add(r.figure(
        "multi_group", f"sync=none, {MULTI_GROUPS}-group events, one per commit", "group-transitions/s",
        value="multi", reference="raw_multi", reference_label="encode+write floor"))

    report.add(r.figure(
        "async", f"AsyncJournal, {ASYNC_COROUTINES} coroutines, one-event commits, sync=always",
        "events/s", value="async", reference="limit",
        reference_label=f"raw os.write+fdatasync of {len(frame)} B (one commit per fsync)",
        target=Target(min_value=100_000),
        note="one flusher thread; every commit awaited while an fsync runs shares the next one"))
    report.add(Figure(
        "async_stall", f"AsyncJournal, {ASYNC_COROUTINES} coroutines: longest event-loop stall",
        max(r.samples["async_stall"]), "ms", reference=1.0, reference_label="the ticker's 1 ms sleep",
        target=Target(max_value=5), samples=list(r.samples["async_stall"]),
        note="how much later than asked a 1 ms sleep returned: the worst of every round"))
    worst = r.samples["async_stall"].index(max(r.samples["async_stall"]))
    report.add(Figure(
        "async_stall_cpu", f"AsyncJournal, {ASYNC_COROUTINES} coroutines: the loop thread's CPU during the "
        "longest stall", r.samples["async_stall_loop_cpu"][worst], "ms", reference=max(r.samples["async_stall"]),
        reference_label="the longest stall",
        note=f"the whole process's CPU meanwhile: {r.samples['async_stall_process_cpu'][worst]:.1f} ms; what is "
             "left of the stall no thread of the process ran (not scheduled on a CPU, or waiting on one "
             "that was not); 99th percentile of the stalls per round: "
             + ", ".join(f"{x:.2f}" for x in r.samples["async_stall_p99"]) + " ms"))
    report.add(Figure(
        "async_gc", f"AsyncJournal, {ASYNC_COROUTINES} coroutines: longest garbage-collector pause",
        max(r.samples["async_gc"]), "ms", reference=max(r.samples["async_stall"]),
        reference_label="the longest event-loop stall", samples=list(r.samples["async_gc"]),
        note="a full collection walks every object of the process and holds the loop's thread "
             "meanwhile; the worst of every round; full collections per 100,000 commits: "
             + ", ".join(f"{x:.1f}" for x in r.samples["async_full_per_100k"]) + " (per round)"))
    add_commit_cost(report, r, parent, threads, quick)

    # bytes per event
    steps = 20 if quick else 200
    rows = 512 if quick else 1024
    log(f"trainer mix: {steps} steps x 16 groups, with and without loader state")
    with scratch_dir(parent, "mix-") as d:
        plain = trainer_mix(os.path.join(d, "plain"), steps=steps, groups_per_step=16, loader_rows=None)
        loaded = trainer_mix(os.path.join(d, "loaded"), steps=steps, groups_per_step=16, loader_rows=rows)
        batched = trainer_mix(os.path.join(d, "batched"), steps=steps, groups_per_step=16,
                              loader_rows=rows, groups_per_event=8)
    report.meta["trainer_mix"] = {"plain": plain, "with_loader_state": loaded,
                                  "with_loader_state_8_groups_per_event": batched}
    report.add(Figure(
        "bytes_per_event", "trainer mix, bytes per event (no loader state)",
        plain["bytes"] / plain["events"], "B/event",
        reference=plain["bare_event_bytes"] / plain["events"],
        reference_label="bare msgpack of the event",
        note=f"{plain['events']:,} one-group events (and checkpoint markers) in {plain['commits']:,} "
             "commits; includes segment header, frame header, LSN, chained CRC"))
    naive = (plain["bytes"] + loaded["naive_state_bytes"]) / loaded["events"]
    report.add(Figure(
        "bytes_per_event_loader", "trainer mix, bytes per event, StatefulDataLoader state on every taken",
        loaded["bytes"] / loaded["events"], "B/event", reference=naive,
        reference_label="pickled state on every taken",
        note=f"{loaded['taken_events']:,} takens over {loaded['epochs']} epochs of a {rows}-row "
             "shuffled loader; the ~5 KB generator tensor is stored once per segment per epoch"))
    report.add(Figure(
        "bytes_per_transition_batched",
        "trainer mix, loader batches of 8: bytes per group-transition, loader state on every taken",
        batched["bytes"] / batched["group_transitions"], "B/transition",
        reference=loaded["bytes"] / loaded["group_transitions"],
        reference_label="1 group per event",
        note=f"{batched['events']:,} events naming {batched['group_transitions']:,} groups"))
    return report
