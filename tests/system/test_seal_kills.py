"""Seals made durable with their rows as one step (`replay/session/row_commits.py`), killed for
real: a child process seals the rollouts of 8 groups at a time from 32 threads (a prefix of
every rollout 0 first) on a `Session` with a `LocalDataPlane`, printing each locator once its
call returned, and is SIGKILLed at a random moment, again and again (each restart restores the
journal and goes on with new groups). After every kill, before the restart: every call that
returned has its commit on the journal's active history, every row the journal's state names
reads back exactly (nothing named that is not durable), and a session opens and seals again
(`row_commit_runs.check`). On the real file system (a SIGKILL loses nothing the kernel has)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from tests.support.row_commit_runs import check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = 8

CHILD = '''
import os, sys, threading, warnings
from replay import LocalDataPlane, Session
from tests.support.row_commit_runs import rows_of
root, idx = sys.argv[1], int(sys.argv[2])
say = lambda line: os.write(1, (line + "\\n").encode())
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    s = Session.open(os.path.join(root, "journal"), data_plane=LocalDataPlane(os.path.join(root, "rows")),
                     compact_every=None)
step = (s.step or 0) + 1
say("ready")

def generate(g, i):
    if i == 0:
        say("ACK " + s.progress(g, 0, 0, rows_of(f"g{g}-r0-a0-p1.rows"), tokens=96))
    say("ACK " + s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows")))

while True:
    gids = s.take({"idx": list(range(idx, idx + 8))})
    idx += 8
    s.admit(gids, step=step, rollouts=4)
    threads = [threading.Thread(target=generate, args=(g, i)) for g in gids for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s.trained(gids, step=step)
    if step % 3 == 0:
        s.checkpoint(step, save=lambda: None)
    step += 1
'''


def test_every_seal_that_returned_before_a_sigkill_has_its_rows_and_its_commit(tmp_path):
    root = str(tmp_path / "run")
    rng = random.Random(11)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    acked_total = 0
    for kill in range(KILLS):
        child = subprocess.Popen([sys.executable, "-c", CHILD, root, str(kill * 100_000)], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n", child.stderr.read().decode()[-2000:]
        time.sleep(rng.uniform(0.05, 0.8))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
        acked = [line.split()[1] for line in out.decode().splitlines() if line.startswith("ACK ")]
        acked_total += len(acked)
        check(root, [(0, loc) for loc in acked])   # before the next restart
    assert acked_total > KILLS * 16, f"only {acked_total} calls returned before the kills"
