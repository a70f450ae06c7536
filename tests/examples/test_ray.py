"""The example trainer's Ray mode on a real multi-node Ray cluster on this machine: rollout
workers are Ray actors on two worker nodes, the trainer (the driver) is the journal's one
writer. The chaos run kills single actors at random moments, removes a whole worker node (a
fresh one joins) and SIGKILLs the controller once (it restores and resumes; the actors of the
dead run are taken over, what they finished for it is fenced). Then `replay.audit` of the
journal: no row trained twice, none lost, every trained group with all its rollouts sealed,
and late results fenced. Every listening socket of the cluster's processes is on loopback.

CI size by default; OJ_RAY_SOAK=n runs a larger dataset with n controller kills.
"""

from __future__ import annotations

import ipaddress
import os
import queue
import random
import signal
import subprocess
import sys
import time

import pytest
import ray

from examples import chaos, ray_workers
from examples.bookkeeping import read_ledger
from replay import audit

SOAK = int(os.environ.get("OJ_RAY_SOAK", "0") or 0)
CONTROLLER_KILLS = max(1, SOAK)
DATASET = 128 if not SOAK else 96 * (SOAK + 1)
EPOCHS = 1 if not SOAK else 2
ROLLOUTS = 4
RUN_TIMEOUT = 240.0 if not SOAK else 1800.0
LOOPBACK = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}


def test_ray_is_imported_in_ray_mode_only():
    code = ("import sys, journal, snapshot, replay, replay.cli, examples.trainer, examples.chaos; "
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


# -- listening sockets of this test's process tree -----------------------------------------------


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue   # it exited meanwhile
        children.setdefault(ppid, []).append(int(name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _socket_inodes(pids) -> dict[str, int]:
    inodes = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[target[8:-1]] = pid
    return inodes


def _address(hex_addr: str):
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    v6 = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return v6.ipv4_mapped or v6


def listening(pids) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket in LISTEN state held by `pids`."""
    inodes = _socket_inodes(pids)
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:
                    host, port = local.split(":")
                    out.append((inodes[inode], str(_address(host)), int(port, 16)))
    return out


def assert_loopback_only(at: str) -> int:
    socks = listening(_descendants(os.getpid()))
    assert socks, f"{at}: no listening socket found among the cluster's processes"
    outside = [s for s in socks if ipaddress.ip_address(s[1]) not in LOOPBACK]
    assert not outside, f"{at}: Ray processes listen outside loopback: {outside}"
    return len(socks)


# -- the cluster ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    c = ray_workers.start_cluster(worker_nodes=2, cpus_per_node=2)
    try:
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _trainer_cmd(cluster, out: str) -> list[str]:
    return [sys.executable, "-m", "examples.trainer", "--ray", "--ray-address", cluster.address,
            "--out", out, "--seed", "3", "--epochs", str(EPOCHS), "--dataset-size", str(DATASET),
            "--batch-size", "8", "--rollouts", str(ROLLOUTS), "--workers", "6", "--ray-actors", "3",
            "--latency-ms", "30", "--deadline-ms", "1500", "--slow-rate", "0.04",
            "--failure-rate", "0.02", "--ckpt-every", "3"]


def _plan(run: int) -> list[tuple[int, str]]:
    """(steps after the run's resume step, kill) for run `run`; the last run is not killed."""
    if run == 0:
        return [(2, "actor"), (3, "node"), (4, "sockets"), (5, "actor"), (6, "controller")]
    if run < CONTROLLER_KILLS:
        return [(1, "actor"), (2, "node" if run % 2 else "actor"), (4, "controller")]
    return [(1, "actor"), (3, "actor")]


def _drive(cluster, kills: ray_workers.ClusterChaos, cmd, out: str, run: int, rng) -> dict:
    """One trainer run, with its kills; returns what it announced."""
    child = chaos.Child(cmd, os.path.join(out, "trainer-stderr.log"))
    p = chaos.Progress()
    ray_line, plan, base = None, list(_plan(run)), None
    deadline = time.monotonic() + RUN_TIMEOUT
    killed = False
    try:
        while True:
            assert time.monotonic() < deadline, f"run {run} timed out:\n" + chaos._tail(
                os.path.join(out, "trainer-stderr.log"))
            try:
                line = child.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                break
            p.feed(line)
            if line.startswith("RAY "):
                ray_line = dict(f.split("=", 1) for f in line.split()[1:])
            if base is None and p.resumed is not None:
                base = p.step
            if killed or base is None or not plan or p.step < base + plan[0][0]:
                continue
            _, kind = plan.pop(0)
            time.sleep(rng.uniform(0.0, 0.4))   # a random moment of that step
            if kind == "actor":
                kills.kill_actor()
            elif kind == "node":
                kills.replace_node()
            elif kind == "sockets":
                assert_loopback_only(f"run {run} at step {p.step}")
            else:
                child.kill()
                killed = True
    finally:
        if child.proc.poll() is None and not killed:
            child.stop()
    rc = child.close()
    if killed:
        assert rc == -signal.SIGKILL
    else:
        assert rc == 0 and p.done, f"run {run} exited {rc}:\n" + chaos._tail(
            os.path.join(out, "trainer-stderr.log"))
    return {"killed": killed, "ray": ray_line, "done": p.done}


def test_ray_chaos_exactly_once(cluster, fast_tmp):
    out = str(fast_tmp / "run")
    os.makedirs(out)
    assert_loopback_only("cluster up")
    kills = ray_workers.ClusterChaos(cluster, out, seed=11)
    rng = random.Random(11)
    cmd = _trainer_cmd(cluster, out)
    runs = [_drive(cluster, kills, cmd, out, r, rng) for r in range(CONTROLLER_KILLS + 1)]

    assert [r["killed"] for r in runs] == [True] * CONTROLLER_KILLS + [False]
    # the actors of a killed controller outlived it and the next one took them over
    assert all(int(r["ray"]["adopted"]) >= 1 for r in runs[1:]), [r["ray"] for r in runs]
    assert kills.counts["actors_killed"] >= 2 and kills.counts["nodes_replaced"] >= 1, kills.counts
    # the finished run killed its actors: nothing of it is left on the cluster
    assert kills.actor_names() == []

    rep = audit(os.path.join(out, "journal"))
    doc = rep.to_dict()
    summary = chaos.report_from_audit(doc, DATASET, EPOCHS)
    assert rep.clean, (doc["not_covered"], doc["rollouts"]["violations"])
    assert summary["trained_twice"] == 0 and summary["lost"] == 0 and summary["in_flight"] == 0, summary
    assert summary["trained_once"] + summary["dropped"] == DATASET * EPOCHS
    assert doc["rollouts"]["violations"] == []
    assert doc["rollouts"]["groups_trained"] == doc["groups"]["trained"] > 0
    ledger = read_ledger(os.path.join(out, "ledger.log")).report(DATASET, EPOCHS)
    assert chaos.compare_reports(summary, ledger) == []
    counters = ledger["counters"]
    # killed actors were noticed: their rollouts were given up and dispatched again
    assert counters.get("actors_lost", 0) >= 1, counters
    # slow actors answered after their deadline: the journal fenced every such result
    assert counters.get("fenced_late_results", 0) >= 1, counters
    print(f"\nray chaos: {kills.counts}, {len(runs) - 1} controller kills, "
          f"{counters.get('fenced_late_results', 0)} fenced late results, "
          f"{counters.get('actors_lost', 0)} rollouts lost with their actor, rollouts {doc['rollouts']}, "
          f"final run: {runs[-1]['done']}")
