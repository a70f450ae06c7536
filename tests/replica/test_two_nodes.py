"""Two writers on two "nodes" (DESIGN section 9, fencing): two processes, two local directories,
one bucket. The second writer gets JournalLocked; a resume on node 2 takes the lease over; the
zombie on node 1, still alive, gets JournalFailed and the bucket holds nothing it wrote after
the takeover."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

from journal.replica.names import LEASE_NAME, ReplicaObject, parse_replica_object
from tests.support.s3_support import S3, options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIP = 0.1


class NodeProcess:
    """`tests/support/replica_node.py` in a process of its own."""

    def __init__(self, url: str, opts: dict, local: str):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.replica_node", url,
                                      json.dumps(opts), local, str(SHIP)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, cwd=ROOT)

    def call(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the node died on {command!r}"
        return json.loads(line)

    def stop(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0


def bucket_objects(s3: S3, prefix: str) -> list[tuple[ReplicaObject, float]]:
    """Every journal object under `prefix` with its creation time (Unix seconds), the lease aside."""
    return [(parse_replica_object(name), created.timestamp())
            for name, created in s3.listing(prefix).items() if name != LEASE_NAME]


def timeline_and_lsn(obj: ReplicaObject) -> tuple[int, int]:
    """The timeline an object belongs to and the last LSN it holds (a cut: its own)."""
    if obj.kind == "cut":
        _, timeline, lsn = obj.cut.split("-")
        return int(timeline), int(lsn)
    return obj.timeline, obj.to_lsn


def test_second_node_is_locked_and_a_takeover_fences_the_zombie_node(s3, prefix, tmp_path):
    url, opts = S3.url(prefix), options(s3.endpoint)
    zombie = NodeProcess(url, opts, str(tmp_path / "node1"))
    heir = NodeProcess(url, opts, str(tmp_path / "node2"))
    assert zombie.call("open")["ok"]
    assert zombie.call("train 3")["ok"]
    shipped = zombie.call("flush")
    assert shipped["ok"] and shipped["timeline"] == 1
    locked = heir.call("open")
    assert locked["error"] == "JournalLocked" and "another writer holds its lease" in locked["message"]
    # the store dates objects to the second: whatever node 1 uploaded is dated before the second
    # of the takeover, and what is dated in that second or later was created after it began
    time.sleep(1.1)
    takeover = math.floor(time.time())
    took = heir.call("resume")
    assert took["ok"] and took["timeline"] > 1
    first = zombie.call("train 1")  # committed locally at most: its shipper finds the lease gone
    assert first.get("ok") or first["error"] == "JournalFailed"
    failed = zombie.call("flush")
    assert failed["error"] == "JournalFailed" and "lost its lease" in failed["message"]
    assert zombie.call("train 1")["error"] == "JournalFailed"  # and every call after
    assert heir.call("train 2")["ok"] and heir.call("flush")["ok"]
    heir.call("close")
    objects = bucket_objects(s3, prefix)
    assert None not in [o for o, _ in objects]
    # nothing on the zombie's timeline holds an LSN it committed after the takeover ...
    placed = [timeline_and_lsn(o) for o, _ in objects]
    assert max(lsn for tl, lsn in placed if tl == 1) == shipped["lsn"]
    # ... and what was created after it is the heir's: its timeline, and its base cut at the
    # branch point (named after the timeline it branches from)
    after = [timeline_and_lsn(o) for o, created in objects if created >= takeover]
    assert after and all(tl == took["timeline"] or (tl == 1 and lsn <= shipped["lsn"]) for tl, lsn in after)
    assert any(tl == took["timeline"] for tl, _ in after)
    zombie.call("close")
    zombie.stop()
    heir.stop()
