"""The lifecycle `python -m bench peers` measures, on this library and on straw-queue, and the
child processes that trace, grow and reopen them.

One group's life, every step durable before the next (`group()` of each class):

| step | ours (`replay.Session`) | straw (`Coordinator` + `SharedFilesystemStore`) |
| --- | --- | --- |
| the loader hands out a prompt | `take(batch)`: `taken`, the loader's state with it | `submit_tasks(..., producer_id="dataset", producer_state={"cursor": ...})` |
| generation starts | `admit([g], rollouts=4)`: `admitted` | `acquire(worker, 1)`: a lease |
| a rollout's partial result | `progress(g, 0, 0, prefix, tokens=2048)`: `rollout_progress` | `publish` the prefix + `save_task_progress(lease, input_ref=prefix)` |
| the rollouts are done | 4 x `seal(g, i, 0, rows)`: each rollout's rows put, then `rollout_sealed`; the last seal's commit also `finished` | `publish` the 4 rollouts' records (one result) + `complete_task(lease, result_ref=...)` |
| a training step consumed it | `trained([g])` | `publish` the consumer's state + `save_consumer_state("training", ...)` |

The progress step runs on both sides or on neither: only when `replay.Session.progress` exists
(the parent decides, `progress=`). Payloads (`payloads=True`): each rollout is 4,096 tokens as
int32 ids plus float32 logprobs (32 KiB), the progress prefix the first 2,048 tokens of rollout
0; ours go to `replay.LocalDataPlane`, straw's into its packs (`Record`s, `bytes.v1`). Without
payloads ours journal locators of rows held elsewhere (`ExternalRows`: nothing is written), and
straw, which completes a task only with a published result, publishes records of no bytes.

With `concurrency=N` above 1 (`python -m bench peers --concurrency N`) N groups are in flight,
each side driven at its best (`batch()`, N groups a call):

| step | ours (`replay.AsyncSession`, N coroutines) | straw (one thread, its batch calls) | sqlite3 WAL FULL (one thread) |
| --- | --- | --- | --- |
| the loader hands out N prompts | `take(batch of N)`: one commit | `submit_tasks(N tasks)` with the producer's state | one transaction of N rows |
| generation starts | `admit(N groups, rollouts=4)`: one commit | `acquire(worker, N)`: N leases | one transaction of N rows |
| partial results | each coroutine: `progress(g, 0, 0, prefix)` | `publish_many` of the N prefixes + `save_task_progress_many` | one transaction of N rows |
| the rollouts are done | each coroutine: 4 x `seal(g, i, 0, rows)` as they finish, the last with `finished` (the seals in flight share one write and sync of their rows and one fsync of their commits) | `publish_many` of the N groups' results + one `complete_task` per group (0.1.6 has no batch completion) | one transaction per group (its 4 seal rows and its finished row) |
| a training step consumed them | `trained(N groups)`: one commit | `publish` + `save_consumer_state` once | one transaction of N rows |

Durable steps per group (`durable_steps`), with progress: ours 5 + 3/N (a progress and 4 seals,
each durable when its call returns; take, admit and trained shared by the N), straw 1 + 7/N (each
completion; 7 batch calls shared by the N), sqlite 1 + 4/N; without progress one fewer each
(straw two fewer batch calls).

Children (`python -m bench.peers_lifecycles MODE LIB DIR ...`, one JSON line on stdout) import
only their own library, so a child's memory is that library's:
- `syncs LIB DIR GROUPS PAYLOADS PROGRESS CONCURRENCY`: warm up, then at least `GROUPS` groups
  (whole steps of CONCURRENCY) between two `chdir` markers, for `strace` to count the sync calls
  between them;
- `history LIB DIR GROUPS`: a history of `GROUPS` groups without payloads, a training step every
  `STEP_GROUPS` groups (ours checkpoints there, as a trainer does with `Session.checkpoint`;
  straw's queue is its own state, and its online GC, off by default in slime, reclaims
  nothing here: one unsealed pack);
- `torch - -`: nothing but `import torch`, timed (what ours' reopen pays when it restores from a
  cut, whose `.pt` tables it loads with torch);
- `reopen LIB DIR`: what a restart does (ours `Session.open`, straw `Coordinator(recover=True)`
  and the producer's and consumer's states), timed; the process's peak RSS (`peak_rss_kib`),
  and its peak after the imports beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
import warnings

TOKENS = 4096            # per rollout
PREFIX_TOKENS = 2048     # the progress step's partial result
ROLLOUTS = 4             # per group
STEP_GROUPS = 64         # groups per training step in a history
RUN_ID = "bench-peers"
QUEUE_ID = "rollout"
WORKER = "worker-0"
WARMUP_GROUPS = 3        # before the first marker of a `syncs` child (N = 1; above, one step)
CONCURRENCY = (1, 8, 64, 256)   # groups in flight, `python -m bench peers --concurrency`


def durable_steps(lib: str, concurrency: int, progress: bool) -> float:
    """The calls per group that return once durable, each side's lifecycle at `concurrency`
    (the module docstring's tables)."""
    n = concurrency
    if n == 1:
        return {"ours": 3 + ROLLOUTS + progress, "straw": 4 + progress, "sqlite": 4}[lib]
    return {"ours": ROLLOUTS + progress + 3 / n, "straw": 1 + (5 + 2 * progress) / n,
            "sqlite": 1 + (3 + progress) / n}[lib]


def rollout_arrays(tokens: int) -> dict:
    """One rollout's payload: `tokens` token ids (int32) and their logprobs (float32)."""
    import numpy as np
    return {"ids": np.arange(tokens, dtype=np.int32) % 50_000,
            "logprobs": np.linspace(-8.0, 0.0, tokens, dtype=np.float32)}


def payload_bytes(arrays: dict) -> bytes:
    """The same payload as straw stores it: the ids' bytes then the logprobs'."""
    return arrays["ids"].tobytes() + arrays["logprobs"].tobytes()


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB since its exec: VmHWM. `getrusage`'s ru_maxrss is not it:
    Linux carries the parent's RSS at the fork into a child's ru_maxrss (the old image's
    high-water mark is recorded at exec), which floors every child at the bench's own RSS."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def files_bytes(*roots: str) -> int:
    """Bytes of the regular files under `roots` (directories themselves not counted)."""
    total = 0
    for root in roots:
        for parent, _, names in os.walk(root):
            for name in names:
                path = os.path.join(parent, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    total += os.path.getsize(path)
    return total


class Cursor:
    """The loader stand-in: its state is the next dataset offset, as slime's producer cursor."""

    def __init__(self) -> None:
        self.offset = 0

    def advance(self) -> int:
        self.offset += 1
        return self.offset - 1

    def state_dict(self) -> dict:
        return {"sample_offset": self.offset, "epoch": 0}

    def load_state_dict(self, state: dict) -> None:
        self.offset = state["sample_offset"]


def external_rows():
    """A data plane for rows the trainer keeps elsewhere (e.g. in its transfer queue): the
    session journals their locators and this stores nothing (`_store` and `store_batch` are
    no-ops: with nothing to make durable, it takes the calls in flight at once, `BATCHES`). The
    lifecycle without payloads; never for a run that must find its rows again."""
    from replay.data_plane.base import RowStore

    class ExternalRows(RowStore):
        BATCHES = True

        def _store(self, locator: str, data: bytes) -> None:
            pass

        def store_batch(self, items: list) -> list:
            return [None] * len(items)

        def has(self, locator: str) -> bool:
            return True

        def delete(self, locators) -> int:
            return len(list(locators))

        def locators(self):
            return iter(())

        def save(self, directory: str, groups) -> None:
            pass

        def get(self, locator: str):
            raise LookupError(f"{locator}: rows held outside the bench are not readable here")

    return ExternalRows()


class Ours:
    """The lifecycle on `replay.Session` (sync="always"), in `directory` (journal/, rows/); with
    `concurrency` above 1, `batch()` runs that many groups at once as coroutines of one
    `replay.AsyncSession` on an event loop of its own, as an asyncio trainer dispatches its
    rollouts (on worker threads of one `Session` the same lifecycle ran at 0.4x the groups/s
    here, CPU-bound on their hand-offs: 0.59 against 0.22 ms of CPU per group at 64)."""

    name = "ours"

    def __init__(self, directory: str, *, payloads: bool, progress: bool, concurrency: int = 1):
        from journal import JournalWarning
        from replay import AsyncSession, LocalDataPlane, Session
        self.directory, self.payloads, self.progress = directory, payloads, progress
        self.journal_dir = os.path.join(directory, "journal")
        self.rows_dir = os.path.join(directory, "rows")
        self.loader = Cursor()
        plane = LocalDataPlane(self.rows_dir) if payloads else external_rows()
        self.concurrency = concurrency
        self._loop = asyncio.new_event_loop() if concurrency > 1 else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)  # a first start warns, naming the path
            if self._loop is None:
                self.session = Session.open(self.journal_dir, loader=self.loader, data_plane=plane)
            else:
                self.session = self._loop.run_until_complete(
                    AsyncSession.open(self.journal_dir, loader=self.loader, data_plane=plane))
        self.step = (self.session.step or 0) + 1
        self.rows = rollout_arrays(TOKENS) if payloads else {"tokens": TOKENS}
        self.prefix = rollout_arrays(PREFIX_TOKENS) if payloads else {"tokens": PREFIX_TOKENS}
        self.groups = 0
        self.fsyncs_at_open = self.session.stats()["fsyncs"]

    def run(self) -> int:
        """One call of the lifecycle: a group (concurrency 1) or a step of N; groups done."""
        return self.group() if self._loop is None else self._loop.run_until_complete(self.batch())

    def group(self) -> int:
        s = self.session
        idx = self.loader.advance()
        (g,) = s.take({"idx": [idx]})
        s.admit([g], step=self.step, policy_version=self.step - 1, rollouts=ROLLOUTS)
        if self.progress:
            s.progress(g, 0, 0, self.prefix, tokens=PREFIX_TOKENS)
        for index in range(ROLLOUTS):
            s.seal(g, index, 0, self.rows)
        s.trained([g], step=self.step)
        self.groups += 1
        return 1

    async def batch(self) -> int:
        """N groups taken and admitted at once, each generated by a coroutine of its own that
        writes its prefix and seals its rollouts as they finish, then trained at once."""
        s = self.session
        gids = await s.take({"idx": [self.loader.advance() for _ in range(self.concurrency)]})
        await s.admit(gids, step=self.step, policy_version=self.step - 1, rollouts=ROLLOUTS)
        await asyncio.gather(*(self._generate(g) for g in gids))
        await s.trained(gids, step=self.step)
        self.groups += len(gids)
        return len(gids)

    async def _generate(self, g: int) -> None:
        s = self.session
        if self.progress:
            await s.progress(g, 0, 0, self.prefix, tokens=PREFIX_TOKENS)
        for index in range(ROLLOUTS):
            await s.seal(g, index, 0, self.rows)

    def end_step(self) -> None:
        self.session.checkpoint(self.step, save=lambda: None)  # the weights: not the bench's
        self.step += 1

    def seam_fsyncs(self) -> int:
        """The journal's fsyncs since the open, counted through its I/O seam (`Session.stats`)."""
        return self.session.stats()["fsyncs"] - self.fsyncs_at_open

    def completed(self) -> int:
        """Groups the journal holds as trained; every other owner must be empty."""
        owners = self.session.stats()["owners"]
        live = sum(n for owner, n in owners.items() if owner not in ("trained", "dropped"))
        return owners["trained"] if live == 0 and owners["dropped"] == 0 else -1

    def close(self) -> None:
        if self._loop is None:
            self.session.close()
            return
        try:
            self._loop.run_until_complete(self.session.close())
        finally:
            self._loop.close()

    def bytes(self) -> int:
        return files_bytes(self.journal_dir, self.rows_dir)


class Straw:
    """The lifecycle on straw-queue's `Coordinator` over a `SharedFilesystemStore` in `directory`
    (profile "local", online GC off: slime's defaults); with `concurrency` above 1, `batch()`
    runs that many groups at once through its batch calls, on one thread (its calls do not
    overlap: from several threads the same steps ran slower here)."""

    name = "straw"

    def __init__(self, directory: str, *, payloads: bool, progress: bool, concurrency: int = 1,
                 recover: bool = False):
        from straw import Coordinator, Publication, Record, SharedFilesystemStore, TaskSpec
        from straw.protocol import encode
        self._record, self._task, self._encode, self._publication = Record, TaskSpec, encode, Publication
        self.concurrency = concurrency
        self.directory, self.payloads, self.progress = directory, payloads, progress
        self.store = SharedFilesystemStore(directory, RUN_ID)
        self.queue = Coordinator(self.store, queue_id=QUEUE_ID, recover=recover,
                                 exclusive_owner="the bench's one process owns this queue")
        self.token = self.queue.open_consumer("training", exclusive_owner="the bench's one trainer")
        state = self.queue.producer_state("dataset")
        self.cursor = state["cursor"]["sample_offset"] if state else 0
        self.rollout = payload_bytes(rollout_arrays(TOKENS)) if payloads else b""
        self.prefix = payload_bytes(rollout_arrays(PREFIX_TOKENS)) if payloads else b""
        self.groups = 0

    def group(self) -> int:
        q, store, Record = self.queue, self.store, self._record
        idx = self.cursor
        task_id = f"prompt:{idx}"
        q.submit_tasks(f"dataset:{idx}", [self._task(task_id, metadata={"idx": idx})],
                       producer_id="dataset",
                       producer_state={"version": 1, "cursor": {"sample_offset": idx + 1, "epoch": 0}})
        self.cursor = idx + 1
        (assignment,) = q.acquire(WORKER, 1, task_ids=[task_id]).assignments
        lease = assignment.lease
        owner = {"task_id": lease.task_id, "attempt_id": lease.attempt_id}
        if self.progress:
            prefix = store.publish([Record("rollout-0-prefix", self.prefix, metadata=owner,
                                           tokens=PREFIX_TOKENS)],
                                   submission_id=f"prefix:{lease.attempt_id}")
            q.save_task_progress(lease, request_id=f"progress:{lease.attempt_id}", input_ref=prefix)
        result = store.publish([Record(f"rollout-{i}", self.rollout, metadata=owner, tokens=TOKENS)
                                for i in range(ROLLOUTS)], submission_id=f"result:{lease.attempt_id}")
        receipt = q.complete_task(lease, submission_id=f"result:{lease.attempt_id}", result_ref=result,
                                  result_digest=result.digest)
        processed = receipt.position + 1
        state = store.publish([Record("training-state", self._encode({"version": 1,
                                                                     "processed_cursor": processed}),
                                      codec="json.v1")], submission_id=f"training-state:{processed}")
        q.save_consumer_state("training", token=self.token, request_id=f"state:{processed}",
                              state_ref=state, fetch_cursor=processed, processed_cursor=processed)
        self.groups += 1
        return 1

    def run(self) -> int:
        """One call of the lifecycle: a group (concurrency 1) or a step of N; groups done."""
        return self.group() if self.concurrency == 1 else self.batch()

    def batch(self) -> int:
        """N groups: one submit, one acquire, the N prefixes published and saved at once, the N
        results published at once and completed one by one, the consumer's state saved once."""
        q, store, Record, Publication = self.queue, self.store, self._record, self._publication
        first, n = self.cursor, self.concurrency
        ids = [f"prompt:{idx}" for idx in range(first, first + n)]
        q.submit_tasks(f"dataset:{first}", [self._task(t, metadata={"idx": first + k}) for k, t in enumerate(ids)],
                       producer_id="dataset",
                       producer_state={"version": 1, "cursor": {"sample_offset": first + n, "epoch": 0}})
        self.cursor = first + n
        leases = [a.lease for a in q.acquire(WORKER, n, task_ids=ids).assignments]
        owners = [{"task_id": lease.task_id, "attempt_id": lease.attempt_id} for lease in leases]
        if self.progress:
            prefixes = store.publish_many(
                [Publication((Record(f"{o['task_id']}-prefix", self.prefix, metadata=o, tokens=PREFIX_TOKENS),))
                 for o in owners], submission_id=f"prefix:{first}")
            q.save_task_progress_many([{"lease": lease, "input_ref": ref} for lease, ref in zip(leases, prefixes)],
                                      request_id=f"progress:{first}")
        results = store.publish_many(
            [Publication(tuple(Record(f"{o['task_id']}-rollout-{i}", self.rollout, metadata=o, tokens=TOKENS)
                               for i in range(ROLLOUTS))) for o in owners], submission_id=f"result:{first}")
        processed = 0
        for lease, ref in zip(leases, results):
            receipt = q.complete_task(lease, submission_id=f"result:{lease.attempt_id}", result_ref=ref,
                                      result_digest=ref.digest)
            processed = max(processed, receipt.position + 1)
        state = store.publish([Record("training-state", self._encode({"version": 1, "processed_cursor": processed}),
                                      codec="json.v1")], submission_id=f"training-state:{processed}")
        q.save_consumer_state("training", token=self.token, request_id=f"state:{processed}",
                              state_ref=state, fetch_cursor=processed, processed_cursor=processed)
        self.groups += n
        return n

    def end_step(self) -> None:
        pass  # the queue's journal is its state; nothing more to make durable at a step

    def own_sync_count(self) -> int:
        """straw's own count of syncs: the ones its Python fault hook is called before."""
        return self.store.backend.metrics["syncs"]

    def completed(self) -> int:
        """Tasks the queue holds as completed and consumed; every other state must be empty."""
        tasks = self.queue.metrics()["tasks"]
        consumer = self.queue.load_consumer_state("training")
        done = tasks.get("completed", 0)
        others = sum(n for state, n in tasks.items() if state != "completed")
        ok = others == 0 and consumer is not None and consumer["processed_cursor"] == done
        return done if ok else -1

    def close(self) -> None:
        try:
            self.queue.close()
        finally:
            self.store.close()

    def bytes(self) -> int:
        return files_bytes(self.directory)


class Sqlite:
    """The reference: stdlib sqlite3 (WAL, `synchronous=FULL`), one thread. At concurrency 1
    `bench append`'s lifecycle (taken, admitted, finished, trained: a transaction each); above
    it the steps of N groups batched as straw's are (the module docstring's table). No
    payloads."""

    name = "sqlite"

    def __init__(self, directory: str, *, payloads: bool, progress: bool, concurrency: int = 1):
        from .append import SQL_INSERT, SQL_SCHEMA, sqlite_connect, sqlite_lifecycle
        if payloads:
            raise ValueError("the sqlite3 reference runs without payloads")
        os.makedirs(directory, exist_ok=True)
        self.directory, self.progress, self.concurrency = directory, progress, concurrency
        self.conn = sqlite_connect(os.path.join(directory, "events.db"))
        self.conn.execute(SQL_SCHEMA)
        self._insert = SQL_INSERT
        self._gids = iter(range(1 << 62))
        self._one = sqlite_lifecycle(self.conn, self._gids, 0)
        self.next_idx = 0
        self.groups = 0

    def run(self) -> int:
        if self.concurrency == 1:
            self.groups += 1
            return self._one() // 4
        return self.batch()

    def _transaction(self, rows: list) -> None:
        ex = self.conn.execute
        ex("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(self._insert, rows)
        except BaseException:
            ex("ROLLBACK")
            raise
        ex("COMMIT")

    def batch(self) -> int:
        n, first = self.concurrency, self.next_idx
        gids = [next(self._gids) for _ in range(n)]
        self.next_idx += n
        self._transaction([("taken", g, first + k, "math", 0, None, None, None) for k, g in enumerate(gids)])
        self._transaction([("admitted", g, None, None, None, 1, 1, None) for g in gids])
        if self.progress:
            self._transaction([("progress", g, None, None, None, None, 1, f"g{g}-r0-a0-p1.rows") for g in gids])
        for g in gids:
            self._transaction([("sealed", g, i, None, None, None, 1, f"g{g}-r{i}-a0.rows") for i in range(ROLLOUTS)]
                              + [("finished", g, None, None, None, None, 1, None)])
        self._transaction([("trained", g, None, None, None, 1, None, None) for g in gids])
        self.groups += n
        return n

    def completed(self) -> int:
        """Groups with a trained row (every group the reference took reaches it)."""
        (n,) = self.conn.execute("SELECT count(*) FROM events WHERE kind = 'trained'").fetchone()
        return n

    def close(self) -> None:
        self.conn.close()

    def bytes(self) -> int:
        return files_bytes(self.directory)


LIBRARIES = {"ours": Ours, "straw": Straw, "sqlite": Sqlite}


# -- the children --------------------------------------------------------------------------------

def _syncs(lib: str, directory: str, groups: int, payloads: bool, progress: bool, concurrency: int) -> dict:
    """At least `groups` groups (whole steps of `concurrency`) between two chdir markers (a
    tracer counts the sync calls between them), after a warm-up."""
    life = LIBRARIES[lib](directory, payloads=payloads, progress=progress, concurrency=concurrency)
    try:
        for _ in range(WARMUP_GROUPS if concurrency == 1 else 1):
            life.run()
        warm = life.groups
        seam_before = life.seam_fsyncs() if lib == "ours" else None
        own_before = life.own_sync_count() if lib == "straw" else None
        os.makedirs(os.path.join(directory, "marker-start"))
        os.makedirs(os.path.join(directory, "marker-stop"))
        os.chdir(os.path.join(directory, "marker-start"))
        while life.groups - warm < groups:
            life.run()
        os.chdir(os.path.join(directory, "marker-stop"))
        out = {"counted": life.groups - warm, "groups": life.groups, "completed": life.completed()}
        if lib == "ours":
            out["seam_fsyncs"] = life.seam_fsyncs() - seam_before
        elif lib == "straw":
            out["own_counter"] = life.own_sync_count() - own_before
        return out
    finally:
        life.close()


def _history(lib: str, directory: str, groups: int) -> dict:
    t0 = time.perf_counter()
    life = LIBRARIES[lib](directory, payloads=False, progress=False)
    try:
        for n in range(1, groups + 1):
            life.group()
            if n % STEP_GROUPS == 0 or n == groups:
                life.end_step()
        completed = life.completed()
    finally:
        life.close()
    root = life.journal_dir if lib == "ours" else directory
    return {"groups": groups, "completed": completed, "seconds": time.perf_counter() - t0,
            "bytes": files_bytes(root)}


def _reopen(lib: str, directory: str) -> dict:
    """What a restart does before it can hand out work again, timed; `cursor` is where the
    producer resumes (the dataset offset after the last group taken)."""
    if lib == "ours":
        from replay import Session
        base = peak_rss_kib()
        loader = Cursor()
        t0 = time.perf_counter()
        s = Session.open(os.path.join(directory, "journal"), loader=loader, data_plane=external_rows(),
                         must_exist=True)
        seconds = time.perf_counter() - t0
        out = {"cursor": loader.offset, "live": sum(1 for _ in s.resume_work),
               "torch_imported": "torch" in sys.modules}
        s.close()
    else:
        from straw import Coordinator, SharedFilesystemStore
        base = peak_rss_kib()
        t0 = time.perf_counter()
        store = SharedFilesystemStore(directory, RUN_ID)
        q = Coordinator(store, queue_id=QUEUE_ID, recover=True,
                        exclusive_owner="the bench's restarted process owns this queue")
        producer = q.producer_state("dataset")
        consumer = q.load_consumer_state("training")
        seconds = time.perf_counter() - t0
        out = {"cursor": producer["cursor"]["sample_offset"], "processed": consumer["processed_cursor"],
               "torch_imported": "torch" in sys.modules}
        q.close()
        store.close()
    return {"seconds": seconds, "rss_after_imports_kib": base, "peak_rss_kib": peak_rss_kib(), **out}


def main(argv: list[str] | None = None) -> None:
    mode, lib, directory, *rest = sys.argv[1:] if argv is None else argv
    if mode == "syncs":
        out = _syncs(lib, directory, int(rest[0]), rest[1] == "1", rest[2] == "1", int(rest[3]))
    elif mode == "history":
        out = _history(lib, directory, int(rest[0]))
    elif mode == "reopen":
        out = _reopen(lib, directory)
    elif mode == "torch":
        t0 = time.perf_counter()
        import torch  # noqa: F401
        out = {"seconds": time.perf_counter() - t0, "peak_rss_kib": peak_rss_kib()}
    else:
        raise SystemExit(f"unknown mode {mode!r}: syncs, history, reopen or torch")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
