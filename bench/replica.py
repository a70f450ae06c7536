"""`python -m bench replica`: the replica (object storage) on a local S3 server.

The server is moto's server mode on 127.0.0.1 (a free port), in a child process started and
stopped here; no traffic goes anywhere else. Figures:

1. replication lag at a trainer-like commit rate (1,000 commits/s paced, `sync="always"`,
   `ship_interval=1.0`): for each commit, the time from its acknowledgement until
   `replica_lag().shipped_lsn` (polled every 5 ms) covers it; p50 and p99 against the target
   p99 <= ship_interval + 0.5 s;
2. commit throughput (unpaced, `sync="always"`) with the shipper running vs without, in
   alternating slices: target >= 0.9x;
3. requests: LISTs and all requests while idle (extrapolated to an hour; target 0 LIST), and
   requests per 1M commits while shipping; bytes stored in the bucket per byte journaled;
4. restore from the bucket alone vs restore of the same journal from its local directory:
   target <= 2x the time;
5. bytes stored in the bucket per byte journaled after a run that compacts with retention
   ("delete", keep_cuts=1) every 5,000 steps (bucket retention trims the bucket by the same
   rule as the local directory).
6. `journal-demo --replica` (node-loss kills: each SIGKILL of the example trainer also deletes
   its local journal, each restart restores from the bucket alone), against this server:
   prompts trained twice / lost in the audit of the bucket, target 0 (small in `--quick`).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

from journal import GroupRef, Journal
from journal.reader import list_segments

from .common import Figure, Report, Target, log, scratch_dir, timed_alternating

BUCKET = "oj-bench-replica"
SHIP_INTERVAL = 1.0
DEMO_QUICK = {"kills": 5, "dataset_size": 256, "batch_size": 16, "epochs": 1}
DEMO_FULL = {"kills": 20, "dataset_size": 2048, "batch_size": 16, "epochs": 2}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds per measurement (default 10; 3 with --quick)")


class LocalS3:
    """moto's server mode on 127.0.0.1 with one bucket, in a process of its own (a real store
    is another machine: its work must not compete for this interpreter's lock)."""

    def __init__(self):
        import boto3
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self.server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                        "-p", str(port)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        self.client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="test",
                                   aws_secret_access_key="test", region_name="us-east-1")
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.create_bucket(Bucket=BUCKET)
                break
            except Exception:  # not listening yet
                if time.monotonic() > deadline or self.server.poll() is not None:
                    self.stop()
                    raise
                time.sleep(0.2)
        self.options = {"endpoint": self.endpoint, "access_key_id": "test", "secret_access_key": "test",
                        "region": "us-east-1", "client_options": {"allow_http": True}}

    def stop(self) -> None:
        self.server.terminate()
        self.server.wait(10)

    def stored_bytes(self, prefix: str) -> int:
        total, token = 0, None
        while True:
            kw = {"Bucket": BUCKET, "Prefix": prefix + "/"}
            if token:
                kw["ContinuationToken"] = token
            page = self.client.list_objects_v2(**kw)
            total += sum(item["Size"] for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return total
            token = page["NextContinuationToken"]


def _step(j: Journal, i: int) -> int:
    gids = j.taken([GroupRef(idx=i)], loader_state={"pos": i + 1})
    j.admitted(gids, target_step=i + 1)
    return 2


def _checkpointed_step(j: Journal, i: int) -> None:
    """`_step`, and a committed checkpoint every 1,000 steps."""
    _step(j, i)
    if i % 1000 == 999:
        j.begin_checkpoint(step=i)
        j.commit_checkpoint(step=i)


def measure_lag(s3: LocalS3, path: str, seconds: float, rate: float) -> list[float]:
    """Per-commit replication lag (s) at `rate` commits per second."""
    j = Journal.open(path, replica=f"s3://{BUCKET}/lag", replica_options=s3.options,
                     ship_interval=SHIP_INTERVAL)
    acked: list[tuple[int, float]] = []
    shipped: list[tuple[int, float]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            shipped.append((j.replica_lag().shipped_lsn, time.monotonic()))
            time.sleep(0.005)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        # one marker per commit, begun and committed in turn (a step is begun only once the last is committed)
        lsn = j.commit_checkpoint(step=n // 2) if n % 2 else j.begin_checkpoint(step=n // 2)
        acked.append((lsn, time.monotonic()))
        n += 1
        pause = start + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    j.flush_replica(timeout=60)
    time.sleep(0.05)
    done.set()
    poller.join()
    j.close()
    lags, k = [], 0
    for lsn, t in acked:  # both lists are in time order
        while shipped[k][0] < lsn:
            k += 1
        lags.append(max(0.0, shipped[k][1] - t))
    return lags


def measure_throughput(s3: LocalS3, tmp: str, seconds: float) -> tuple[dict, dict, int, int]:
    plain = Journal.open(os.path.join(tmp, "plain"))
    shipped = Journal.open(os.path.join(tmp, "shipped"), replica=f"s3://{BUCKET}/throughput",
                           replica_options=s3.options, ship_interval=SHIP_INTERVAL)
    counters = {"plain": 0, "shipped": 0}

    def body(name: str, j: Journal):
        def one() -> int:
            counters[name] += 1
            return _step(j, counters[name])
        return one

    rates = timed_alternating({"plain": body("plain", plain), "shipped": body("shipped", shipped)},
                              seconds)
    shipped.flush_replica(timeout=120)
    requests, commits = shipped.replica_lag().requests, shipped.lsn
    plain.close()
    shipped.close()  # cuts the active segment's preallocated zeros: its size is what was journaled
    journaled = sum(s.size for s in list_segments(shipped.path))
    return rates, requests, commits, journaled


def measure_idle(s3: LocalS3, path: str, seconds: float) -> dict:
    j = Journal.open(path, replica=f"s3://{BUCKET}/idle", replica_options=s3.options,
                     ship_interval=SHIP_INTERVAL)
    _step(j, 0)
    j.flush_replica(timeout=30)
    before = j.replica_lag().requests
    time.sleep(seconds)
    after = j.replica_lag().requests
    j.close()
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}


def measure_restore(s3: LocalS3, path: str, steps: int) -> tuple[float, float]:
    from replay import restore
    from snapshot import compact
    url = f"s3://{BUCKET}/restore"
    j = Journal.open(path, replica=url, replica_options=s3.options, ship_interval=SHIP_INTERVAL,
                     segment_bytes=1 << 20)
    for i in range(steps):
        _checkpointed_step(j, i)
        if i == steps // 2:
            compact(path, at="latest-checkpoint", journal=j, retention=None)
    j.flush_replica(timeout=120)
    j.close()
    local, bucket = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        restore(path)
        local.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        restore(url, replica_options=s3.options)
        bucket.append(time.perf_counter() - t0)
    return statistics.median(bucket), statistics.median(local)


def measure_retention(s3: LocalS3, path: str, steps: int) -> tuple[int, int, int]:
    """(bytes stored in the bucket, of them in cuts, bytes journaled) after `steps` steps, a
    checkpoint every 1,000 and a compaction with retention every 5,000."""
    from snapshot import compact
    j = Journal.open(path, replica=f"s3://{BUCKET}/retention", replica_options=s3.options,
                     ship_interval=SHIP_INTERVAL, segment_bytes=1 << 18)
    written: dict[str, int] = {}  # segment -> its size (retention deletes the local files)
    for i in range(steps):
        _checkpointed_step(j, i)
        if i % 5000 == 4999:
            j.flush_replica(timeout=120)
            written.update((s.name, s.size) for s in list_segments(path))
            compact(path, at="latest-checkpoint", journal=j, retention="delete", keep_cuts=1)
    j.flush_replica(timeout=120)
    j.close()  # cuts the active segment's preallocated zeros: its size is what was journaled
    written.update((s.name, s.size) for s in list_segments(path))
    return s3.stored_bytes("retention"), s3.stored_bytes("retention/cuts"), sum(written.values())


def measure_demo(s3: LocalS3, out: str, quick: bool) -> dict:
    """`journal-demo --replica` against `s3`: its summary."""
    from examples import chaos
    o = chaos.Options(out=out, replica=f"s3://{BUCKET}/demo", replica_options=s3.options, verbose=False,
                      timeout=1800.0, **(DEMO_QUICK if quick else DEMO_FULL))
    return chaos.run(o)


def run(args) -> Report:
    report = Report("replica", quick=args.quick, directory=args.dir)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    s3 = LocalS3()
    try:
        with scratch_dir(args.dir, "bench-replica-") as tmp:
            log(f"lag at 1,000 commits/s for {seconds:.0f} s ...")
            lags = sorted(measure_lag(s3, os.path.join(tmp, "lag"), seconds, 1000.0))
            p50, p99 = lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))]
            bound = SHIP_INTERVAL + 0.5
            rate = len(lags) / seconds
            report.add(Figure("lag_p50", f"replication lag p50 ({rate:,.0f} commits/s, sync=always)",
                              p50, "s", reference=SHIP_INTERVAL, reference_label="ship_interval"))
            report.add(Figure("lag_p99", f"replication lag p99 ({rate:,.0f} commits/s, sync=always)",
                              p99, "s", reference=SHIP_INTERVAL, reference_label="ship_interval",
                              target=Target(max_value=bound)))
            log(f"throughput with and without the shipper, {seconds:.0f} s each ...")
            rates, requests, commits, journaled = measure_throughput(s3, tmp, seconds)
            report.add(Figure("throughput", "commit throughput with the shipper (sync=always)",
                              rates["shipped"], "commits/s", reference=rates["plain"],
                              reference_label="without a replica", target=Target(min_ratio=0.9)))
            per_million = sum(requests.values()) / commits * 1e6
            report.add(Figure("requests_per_million", "requests per 1M commits while shipping",
                              per_million, "requests", note=", ".join(f"{k} {v}" for k, v in
                                                                  sorted(requests.items()))))
            stored = s3.stored_bytes("throughput")
            report.add(Figure("bytes_ratio", "bytes stored in the bucket per byte journaled",
                              stored / journaled, "x", note=f"{stored:,} B stored, {journaled:,} B "
                              "of segments (tail pieces stay beside the sealed segment)"))
            idle_seconds = max(seconds, 12.0)
            log(f"idle for {idle_seconds:.0f} s ...")
            idle = measure_idle(s3, os.path.join(tmp, "idle"), idle_seconds)
            per_hour = 3600 / idle_seconds
            report.add(Figure("idle_list", "LIST requests per hour, idle", idle.get("LIST", 0) * per_hour,
                              "requests", target=Target(max_value=0)))
            report.add(Figure("idle_requests", "all requests per hour, idle",
                              sum(idle.values()) * per_hour, "requests",
                              note="the lease renewals (one conditional PUT every 10 s)"))
            steps = 20_000 if args.quick else 100_000
            log(f"restore from the bucket vs local ({steps:,} steps) ...")
            bucket, local = measure_restore(s3, os.path.join(tmp, "restore"), steps)
            report.add(Figure("restore", f"restore from the bucket alone ({2 * steps:,} commits)",
                              bucket, "s", reference=local, reference_label="the local directory",
                              target=Target(max_value=2 * local)))
            log(f"bucket retention ({steps:,} steps) ...")
            stored, in_cuts, journaled = measure_retention(s3, os.path.join(tmp, "retention"), steps)
            report.add(Figure("bytes_after_retention", "bytes stored in the bucket per byte "
                              "journaled, with retention", stored / journaled, "x",
                              note=f"{stored:,} B stored ({in_cuts:,} B of them the kept cut), "
                              f"{journaled:,} B of segments written"))
            log("journal-demo --replica (node-loss kills) ...")
            demo = measure_demo(s3, os.path.join(tmp, "demo"), args.quick)
            report.add(Figure("demo_replica", f"journal-demo --replica ({demo['kills']} node-loss kills, "
                              f"{demo['restores']} restores from the bucket): twice + lost",
                              demo["twice"] + demo["lost"], "prompts", target=Target(max_value=0),
                              note=f"{demo['twice']} twice / {demo['lost']} lost of "
                              f"{demo['audit']['trained_once'] + demo['audit']['dropped']} rows trained once or "
                              f"dropped, ledger {'agrees' if not demo['ledger_mismatches'] else 'DISAGREES'}, "
                              f"{demo['wall_seconds']} s"))
    finally:
        s3.stop()
    return report
