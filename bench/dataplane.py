"""`python -m bench dataplane`: the session's lifecycle with rollout payloads in the library's
data plane, against the same lifecycle without payloads; bytes on disk per rollout.

Payload: one rollout of 4,096 tokens, as int32 token ids and float32 logprobs (two torch
tensors, 32 KiB). The lifecycle of a batch of N groups in flight (`--concurrency`, default 1
and 64), each journaled durably (sync="always") by a `replay.Session`: `take` (one commit for
the batch), `admit(rollouts=4)` (one commit), four seals per group, all of the batch's at once
(one thread each, at most `--threads`, default 64, in flight; each seal: the rollout's rows
durable in the data plane and `rollout_sealed` journaled, the group's last seal journaling
`finished` with it), then `trained` (one commit): 8 transitions per group. With the packed data
plane a seal's rows and its commit are one durable step shared by the seals in flight
(`replay/session/row_commits.py`). At each N, the sessions, each in its own directory, run it
in turns of `--slice` seconds, round after round (the order rotating, so drifting load hits
each alike; medians of the rounds):

* **packed**: `LocalDataPlane` (rows packed into append-only files, one write and one
  fdatasync for the seals that put at once);
* **none**: the same lifecycle with a data plane that stores nothing (the seal journals a
  locator and no payload is written): the reference;
* **file per row** (at the smallest N only): the layout `LocalDataPlane` had before packs, kept
  here as a reference (per put: a temporary file, its fsync, a hard link to the locator's name,
  the temporary name removed and the directory fsynced).

Between turns, outside the timing, each session checkpoints, which deletes the rows of the
groups trained before it (packs are then compacted or removed), so the disk stays bounded.

Figures: groups/s with payloads over groups/s without, per N (`dataplane_payload_vs_none` at
N = 1, target >= 0.5x; `dataplane_payload_vs_none_64` at 64, target >= 0.7x), the
file-per-row layout's the same way (informational); data-plane fsyncs per group; the packed
data plane's fdatasync p50 beside its session's journal fsync p50 (the two syncs of a batch);
bytes on disk per rollout
(every block of the data plane's directory, after a lifecycle of `--bytes-groups` groups and
before any delete, over the rollouts it holds) against the payload (target <= 1.1x); and the
most bytes the packed directory held after a checkpoint, when no row is live (informational:
what reclaiming leaves).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import secrets
import time
import warnings
from typing import Any, Iterable, Iterator

import torch

from journal import JournalWarning
from replay import LocalDataPlane, Session
from replay.data_plane import names
from replay.data_plane.base import RowStore
from replay.session.stats import MeasuredFileSystem

from .common import Figure, Report, Rounds, Target, log, scratch_dir

TOKENS = 4096
ROLLOUTS = 4
TARGETS = {1: 0.5, 64: 0.7}   # payloads vs none, by groups in flight


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", default="1,64",
                        help="groups in flight per batch, a comma-separated list (default %(default)s)")
    parser.add_argument("--threads", type=int, default=64,
                        help="most threads sealing a batch's rollouts at once (default 64: one per seal "
                             "up to 64)")
    parser.add_argument("--slice", type=float, default=None, help="seconds per turn (default 1 quick, 3 full)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3 quick, 7 full)")
    parser.add_argument("--bytes-groups", type=int, default=64,
                        help="groups whose rows are counted for bytes on disk (default 64)")


def payload() -> dict[str, torch.Tensor]:
    """One rollout: 4,096 token ids (int32) and their logprobs (float32), 32 KiB."""
    g = torch.Generator().manual_seed(0)
    return {"ids": torch.randint(0, 150_000, (TOKENS,), dtype=torch.int32, generator=g),
            "logprobs": -torch.rand(TOKENS, generator=g, dtype=torch.float32)}


class PlaneFS(MeasuredFileSystem):
    """A data plane's file system: fsyncs counted and timed (as a session's journal's are),
    directory fsyncs counted."""

    def __init__(self) -> None:
        super().__init__()
        self.dir_fsyncs = 0

    def fsync_dir(self, path: str) -> None:
        self.dir_fsyncs += 1
        super().fsync_dir(path)


class NoPayload:
    """A data plane that stores nothing: a seal journals its locator, no payload is written."""

    def put_rollout(self, group_id: int, index: int, attempt: int, rows: Any) -> str:
        return names.rollout_locator(group_id, index, attempt)

    def delete(self, locators: Iterable[str]) -> int:
        return len(list(locators))

    def locators(self) -> Iterator[str]:
        return iter(())


class FilePerRow(RowStore):
    """The reference: one crash-safe file per rollout (temporary file, fsync, hard link to the
    locator's name, temporary name removed, directory fsync), as LocalDataPlane stored rows
    before packs."""

    def __init__(self, root: str, fs: PlaneFS):
        self.root, self.fs = root, fs
        os.makedirs(root, exist_ok=True)

    def _store(self, locator: str, data: bytes) -> None:
        tmp = os.path.join(self.root, f".tmp-{locator}-{secrets.token_hex(4)}")
        f = self.fs.create(tmp)
        try:
            f.write(data)
            f.sync()
        finally:
            f.close()
        os.link(tmp, os.path.join(self.root, locator))
        os.unlink(tmp)
        self.fs.fsync_dir(self.root)

    def delete(self, locators: Iterable[str]) -> int:
        gone = 0
        for loc in locators:
            os.unlink(os.path.join(self.root, loc))
            gone += 1
        return gone

    def locators(self) -> Iterator[str]:
        return (n for n in os.listdir(self.root) if names.is_locator(n))


class Lifecycle:
    """One session and the state of its loop: batches of groups through the lifecycle."""

    def __init__(self, directory: str, plane: Any, pool: concurrent.futures.Executor, groups: int):
        self.plane, self.pool, self.groups = plane, pool, groups
        with warnings.catch_warnings():   # a first start, on purpose
            warnings.simplefilter("ignore", JournalWarning)
            self.session = Session.open(os.path.join(directory, "journal"), data_plane=plane,
                                        compact_every=None)
        self.row = payload()
        self.step = 0
        self.next_idx = 0

    def batch(self) -> int:
        """One batch through the lifecycle; returns the groups it finished and trained."""
        s = self.session
        self.step += 1
        gids = s.take({"idx": list(range(self.next_idx, self.next_idx + self.groups))})
        self.next_idx += self.groups
        s.admit(gids, step=self.step, policy_version=self.step - 1, rollouts=ROLLOUTS)
        seals = [self.pool.submit(s.seal, gid, i, 0, self.row) for gid in gids for i in range(ROLLOUTS)]
        for f in seals:
            f.result()
        s.trained(gids, step=self.step)
        return len(gids)

    def run_for(self, seconds: float) -> tuple[float, int]:
        """Batches for `seconds`: (groups per second, groups)."""
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            n += self.batch()
        return n / (time.perf_counter() - start), n

    def checkpoint(self) -> None:
        self.session.checkpoint(self.step, save=lambda: None)

    def close(self) -> None:
        self.session.close()


def disk_bytes(root: str) -> int:
    """Bytes of the blocks every file under `root` occupies."""
    return sum(os.stat(os.path.join(d, n)).st_blocks * 512 for d, _, files in os.walk(root) for n in files)


def _planes(directory: str, with_file_per_row: bool) -> dict[str, tuple[Any, PlaneFS]]:
    """Each data plane, by name, with the file system that counts its fsyncs."""
    packed, per_row = PlaneFS(), PlaneFS()
    planes = {"packed": (LocalDataPlane(os.path.join(directory, "packed", "rows"), fs=packed), packed),
              "none": (NoPayload(), PlaneFS())}
    if with_file_per_row:
        planes["file per row"] = (FilePerRow(os.path.join(directory, "file per row", "rows"), per_row), per_row)
    return planes


def _fsyncs(fs: PlaneFS) -> int:
    return fs.fsyncs + fs.dir_fsyncs


def _key(name: str, n: int) -> str:
    return f"{name}@{n}"


def run(args) -> Report:
    quick = args.quick
    slice_s = args.slice or (1.0 if quick else 3.0)
    rounds = args.rounds or (3 if quick else 7)
    concurrency = sorted({int(x) for x in str(args.concurrency).split(",") if x.strip()})
    report = Report("dataplane", quick=quick, directory=args.dir)
    report.meta.update(concurrency=concurrency, threads=args.threads, slice_seconds=slice_s,
                       rounds=rounds, payload_bytes=2 * 4 * TOKENS, rollouts_per_group=ROLLOUTS)
    with scratch_dir(args.dir, "bench-dataplane-") as d, \
            concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        per_row = _bytes_per_rollout(d, pool, args, concurrency[0])
        rates, fsyncs, left, p50 = _lifecycles(d, pool, concurrency, slice_s, rounds)
    payload_bytes = 2 * 4 * TOKENS
    for n in concurrency:
        name = "dataplane_payload_vs_none" + ("" if n == 1 else f"_{n}")
        report.add(rates.figure(
            name, f"lifecycle with 32 KiB payloads, packed data plane, {n} groups in flight", "groups/s",
            value=_key("packed", n), reference=_key("none", n),
            reference_label="the same lifecycle without payloads",
            target=Target(min_ratio=TARGETS[n]) if n in TARGETS else None,
            note=f"{n} groups a batch, their {ROLLOUTS * n} seals from {min(args.threads, ROLLOUTS * n)} "
                 f"threads at once; data-plane fsyncs per group {fsyncs[_key('packed', n)]:.2f}; the "
                 f"fsync p50 of the rows {p50[n][0]} ms, of the journal {p50[n][1]} ms"))
    n = concurrency[0]
    report.add(rates.figure(
        "dataplane_file_per_row_vs_none", f"lifecycle with 32 KiB payloads, one file per row, {n} groups in "
        "flight", "groups/s", value=_key("file per row", n), reference=_key("none", n),
        reference_label="the same lifecycle without payloads"))
    for name in ("packed", "file per row"):
        report.add(Figure(f"dataplane_fsyncs_per_group_{name.replace(' ', '_')}",
                          f"data-plane fsyncs per group, {name}, {n} groups in flight (files and "
                          "directories, the checkpoints' reclaiming included)", fsyncs[_key(name, n)], "fsyncs"))
    report.add(Figure("dataplane_fsync_p50", f"data-plane fdatasync p50, packed, {n} groups in flight (its "
                      "batches of rows)", p50[n][0], "ms", reference=p50[n][1],
                      reference_label="the journal's fsync p50, same session",
                      note="a batch's rows are fdatasynced, then its commits fsynced (the next batch's "
                           "rows meanwhile)"))
    report.add(Figure("dataplane_bytes_per_rollout", "bytes on disk per rollout, packed",
                      per_row["packed"], "B", reference=payload_bytes, reference_label="the payload",
                      target=Target(max_ratio=1.1)))
    report.add(Figure("dataplane_bytes_per_rollout_file_per_row", "bytes on disk per rollout, one file per row",
                      per_row["file per row"], "B", reference=payload_bytes, reference_label="the payload"))
    report.add(Figure("dataplane_disk_after_checkpoint", "packed data plane on disk after a checkpoint "
                      "(the most of any turn; no row is live then)", left, "B"))
    report.note("file per row is the layout LocalDataPlane had before packs, kept in bench/dataplane.py "
                "as the reference; 'none' stores no payload (its seals journal a locator only)")
    return report


def _bytes_per_rollout(directory: str, pool, args, n: int) -> dict[str, float]:
    out = {}
    for name, (plane, _) in _planes(os.path.join(directory, "bytes"), True).items():
        if name == "none":
            continue
        life = Lifecycle(os.path.join(directory, "bytes", name), plane, pool, n)
        while life.next_idx < args.bytes_groups:
            life.batch()
        life.close()
        rollouts = sum(1 for _ in plane.locators())
        out[name] = disk_bytes(plane.root) / rollouts
        log(f"bytes on disk per rollout, {name}: {out[name]:,.0f} B ({rollouts} rollouts)")
    return out


def _lifecycles(directory: str, pool, concurrency: list[int], slice_s: float,
                rounds: int) -> tuple[Rounds, dict[str, float], float, dict[int, tuple]]:
    """Rates per data plane and N (`_key`), round by round; data-plane fsyncs per group; the
    most bytes a packed data plane held after a checkpoint; per N the fsync p50 of the packed
    data plane and of its session's journal (ms)."""
    planes, lives = {}, {}
    for n in concurrency:
        for name, (plane, fs) in _planes(os.path.join(directory, f"run{n}"), n == concurrency[0]).items():
            planes[_key(name, n)] = (plane, fs)
            lives[_key(name, n)] = Lifecycle(os.path.join(directory, f"run{n}", name), plane, pool, n)
    rates = Rounds()
    groups = dict.fromkeys(lives, 0)
    left = 0
    fsyncs_before = {key: _fsyncs(fs) for key, (_, fs) in planes.items()}
    try:
        order = list(lives)
        for r in range(rounds):
            for key in order[r % len(order):] + order[:r % len(order)]:
                rate, n = lives[key].run_for(slice_s)
                rates.add(key, rate)
                groups[key] += n
                lives[key].checkpoint()
                if key.startswith("packed"):
                    left = max(left, disk_bytes(planes[key][0].root))
            log(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:,.0f} groups/s"
                                                          for k, v in rates.samples.items()))
        p50 = {n: (planes[_key("packed", n)][1].latency_ms()["fsync_p50_ms"],
                   lives[_key("packed", n)].session.stats()["fsync_p50_ms"]) for n in concurrency}
    finally:
        for life in lives.values():
            life.close()
    fsyncs = {key: (_fsyncs(fs) - fsyncs_before[key]) / max(groups[key], 1) for key, (_, fs) in planes.items()}
    return rates, fsyncs, float(left), p50
