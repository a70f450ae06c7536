"""Test 6: a real crash loop. A child process appends with sync="always" (tests/support/crash_child.py:
mixed transitions, rollout seals and failures, transactions, checkpoint markers, a loader
state holding a tensor, small segments so it rotates) and prints every acknowledged LSN; the
parent SIGKILLs it at random moments (20 times, or $OJ_CRASH_LOOP_KILLS), reopens the journal
each time (from the newest cut's state file when the child compacted) and checks: every
acknowledged commit is present with the events the child was told
were durable (rollouts with their attempts and locators), LSNs run 1..n without gaps, a strict
Reader verifies, the reopened state (rollouts included) equals an independent fold
(tests/support/journal_model.py) of what is on disk, and `restore` equals that fold at the latest
committed checkpoint (the rollouts it hands back, and the attempts a resume would fence).
The next child continues the same journal.

The children are forked from one zygote process that imported torch once (see crash_child.py);
set OJ_CRASH_LOOP_FORK=0 to start a fresh interpreter for every run instead.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time

from tests.support.crash_oracle import check_restore
from journal import Journal, Reader
from journal.layout import SNAPSHOTS_DIR
from journal.loader_state import unpack
from snapshot import compact
from tests.support.equality import deep_equal
from tests.support.journal_model import assert_journal_matches, events_of, fold_records

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(os.path.dirname(HERE), "support", "crash_child.py")
KILLS = int(os.environ.get("OJ_CRASH_LOOP_KILLS", "20"))
FORK = os.environ.get("OJ_CRASH_LOOP_FORK", "1") != "0"
SEGMENT_BYTES = 8192
TIMEOUT = 120  # seconds to wait for a line the child must print (a hang, not a timing check)


class Lines:
    """Lines of a pipe, read by a thread into a queue."""

    def __init__(self, pipe):
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe):
        for raw in pipe:
            self.q.put(raw.decode().rstrip("\n"))
        self.q.put(None)

    def get(self, timeout=TIMEOUT):
        return self.q.get(timeout=timeout)

    def until(self, prefix: str, sink: list) -> str:
        """Lines up to the first one starting with `prefix` (returned); the others go to sink."""
        while True:
            line = self.get()
            assert line is not None, f"child output ended before {prefix!r}; got {sink[-3:]}"
            if line.startswith(prefix):
                return line
            sink.append(line)

    def drain(self, sink: list) -> None:
        while True:
            try:
                line = self.q.get_nowait()
            except queue.Empty:
                return
            if line is not None:
                sink.append(line)


def child_env():
    return dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))


class Zygote:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, CHILD, "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=child_env())
        self.lines = Lines(self.proc.stdout)
        assert self.lines.until("READY", []) == "READY"

    def send(self, cmd: str) -> None:
        self.proc.stdin.write((cmd + "\n").encode())
        self.proc.stdin.flush()

    def start(self, path: str, seed: int) -> int:
        self.send(f"run {path} {seed} {SEGMENT_BYTES}")
        return int(self.lines.until("PID ", []).split()[1])

    def kill(self, pid: int, out: list) -> int:
        os.kill(pid, signal.SIGKILL)
        self.send(f"wait {pid}")
        _, _, code = self.lines.until(f"EXIT {pid} ", out).split()
        return int(code)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(TIMEOUT)


class Fresh:
    """One new interpreter per run (OJ_CRASH_LOOP_FORK=0)."""

    def start(self, path: str, seed: int) -> int:
        self.proc = subprocess.Popen([sys.executable, CHILD, "run", path, str(seed), str(SEGMENT_BYTES)],
                                     stdout=subprocess.PIPE, env=child_env())
        self.lines = Lines(self.proc.stdout)
        return self.proc.pid

    def kill(self, pid: int, out: list) -> int:
        os.kill(pid, signal.SIGKILL)
        code = self.proc.wait(TIMEOUT)
        while (line := self.lines.get()) is not None:
            out.append(line)
        return code

    def close(self):
        pass


def test_sigkill_crash_loop(tmp_path):
    path = str(tmp_path / "journal")
    rng = random.Random(int(os.environ.get("OJ_CRASH_LOOP_SEED", "20")))
    acked: dict[int, list] = {}
    runner = Zygote() if FORK else Fresh()
    opens_with_commits = opens_from_cut = 0
    try:
        for i in range(KILLS):
            pid = runner.start(path, rng.randrange(1 << 30))
            out: list[str] = []
            # kill at a random moment: sometimes while it opens (recovers), mostly mid-append
            time.sleep(0 if rng.random() < 0.15 else rng.uniform(0.02, 0.3))
            if isinstance(runner, Zygote):
                runner.lines.drain(out)
            code = runner.kill(pid, out)
            assert code == -signal.SIGKILL, f"run {i}: child exited with {code} before the kill: {out[-5:]}"
            for line in out:
                if line.startswith("ACK "):
                    _, lsn, evs = line.split(" ", 2)
                    assert int(lsn) not in acked, f"LSN {lsn} acknowledged twice"
                    acked[int(lsn)] = json.loads(evs)
                elif line.startswith("OPEN "):
                    opens_with_commits += int(line.split()[1]) > 0
            opens_from_cut += check(path, acked, i)
            if i == KILLS // 2 and not opens_from_cut and os.path.isdir(path):
                # the children compact now and then; on a slow machine they may all have been
                # killed first: a cut for the second half's opens to start from
                compact(path, "end", retention=None)
    finally:
        runner.close()
    assert len(acked) > KILLS, "the children acknowledged almost nothing"
    assert opens_with_commits >= KILLS // 2, "the children rarely continued an existing journal"
    assert opens_from_cut, "no reopen had a cut (and its state file) to start from"


def check(path: str, acked: dict[int, list], run: int) -> bool:
    """Reopen and check the journal; whether a cut was there to open from."""
    if not os.path.isdir(path):  # killed before it created anything
        assert not acked
        return False
    snapshots = os.path.join(path, SNAPSHOTS_DIR)
    had_cut = os.path.isdir(snapshots) and any(n.startswith("cut-") for n in os.listdir(snapshots))
    with Journal.open(path, segment_bytes=SEGMENT_BYTES) as j:  # recovery (cuts a torn tail)
        reader = Reader(path)
        records = list(reader.records())
        assert not reader.problems, reader.problems
        lsns = [r.commit.lsn for r in records]
        assert lsns == list(range(1, len(lsns) + 1)), f"run {run}: LSNs not contiguous"
        n = len(lsns)
        assert not acked or max(acked) <= n, f"run {run}: acknowledged LSN {max(acked)} lost (have {n})"
        for lsn, evs in acked.items():
            rec = records[lsn - 1]
            disk = [list(e) for e in events_of(rec.commit)]
            for e in disk:  # a taken's loader state: compare the counter the child stored
                if e[0] == "taken" and e[2] is not None:
                    e[2] = unpack(e[2], rec.blobs)["_num_yielded"]
            assert disk == evs, f"run {run}: LSN {lsn} on disk {disk} != acknowledged {evs}"
        model = fold_records(records)
        assert_journal_matches(j, model)
        if model.has_loader:
            assert deep_equal(j.loader_state(), model.loader, key_order=True)
            assert j.loader_state()["_num_yielded"] == model.loader["_num_yielded"]
        else:
            assert j.loader_state() is None
    if model.committed:
        step, begun = max(model.committed.items(), key=lambda kv: kv[1])
        check_restore(path, fold_records(records[:begun]), step)
    else:
        check_restore(path, fold_records([]), None)
    return had_cut
