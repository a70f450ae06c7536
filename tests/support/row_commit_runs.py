"""A session whose journal and `LocalDataPlane` write through one `FaultFS`, its seals and
prefixes made durable as one step each (`replay/session/row_commits.py`), and the check of any
directory such a run may leave (a crash state, what a failed operation left, a SIGKILLed
child's), for tests/replay/test_row_commits.py and the system tests of that path.

The layout: `root/journal` and `root/rows`. `Acks` notes when each call returned, counted in
operations of the seam. `workload`: four groups admitted with rollouts=4, a prefix of every
group's rollout 0 (one at a time), the 16 seals from 16 threads at once (the first rows'
fdatasync held until all are queued, so they batch), the groups trained, a checkpoint (which
deletes their rows). `check` holds a directory to the guarantees: every commit on disk that
names rows names complete rows (a live group's sealed rollouts and prefixes read back exactly);
every call that returned before the crash point has its commit on disk; a session opens on it
(restore, the rows nothing names deleted) and seals again.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from contextlib import contextmanager
from unittest import mock

import numpy as np

from journal import JournalWarning, Reader
from journal.events import RolloutProgress, RolloutSealed
from journal.reader import list_segments
from replay import LocalDataPlane, Session
from replay.session import core
from snapshot.data_plane import prefix_locators, row_locators
from tests.support.data_plane_runs import at_once
from tests.support.equality import deep_equal
from tests.support.faultfs import FaultFS

GROUPS, ROLLOUTS = 4, 4


def rows_of(locator: str) -> dict:
    """The rows every run stores under `locator` (checked against what reads back)."""
    seed = sum(locator.encode())
    return {"locator": locator, "tokens": np.arange(seed % 50, seed % 50 + 96, dtype=np.int32)}


class MeasuredFaultFS(FaultFS):
    """A `FaultFS` with what `Session.stats()` reads of its journal's file system."""

    @property
    def fsyncs(self) -> int:
        return self.count("fsync", path_contains=os.sep + "journal" + os.sep)

    def latency_ms(self) -> dict:
        return {"fsync_p50_ms": None, "fsync_p99_ms": None}


@contextmanager
def journal_through(fs: FaultFS):
    """Sessions opened meanwhile write their journal through `fs`."""
    with mock.patch.object(core, "MeasuredFileSystem", lambda: fs), warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)   # a first start warns
        yield


def open_session(root: str, fs: FaultFS) -> Session:
    """A session on `root/journal` and a `LocalDataPlane` on `root/rows`, both through `fs`."""
    with journal_through(fs):
        return Session.open(os.path.join(root, "journal"), compact_every=None,
                            data_plane=LocalDataPlane(os.path.join(root, "rows"), fs=fs))


class Acks:
    """The calls that returned: (operations of the seam by then, the locator they stored)."""

    def __init__(self, fs: FaultFS) -> None:
        self.fs, self.calls, self._lock = fs, [], threading.Lock()

    def note(self, locator: str) -> str:
        with self._lock:
            self.calls.append((len(self.fs.ops), locator))
        return locator


def hold_first_rows(s: Session, fs: FaultFS, calls: int) -> None:
    """The first fdatasync of the data plane waits (at most 10 s) until `calls` more calls are
    queued behind it, so that they make one batch."""
    first = threading.Event()

    def hold(kind, path):
        if os.sep + "rows" + os.sep in path and not first.is_set():
            first.set()
            deadline = time.monotonic() + 10
            while len(s.row_commits._queue) < calls and time.monotonic() < deadline:
                time.sleep(0.001)

    fs.on("fsync", hold)


def workload(s: Session, fs: FaultFS, acks: Acks, *, first_idx: int = 0) -> None:
    gids = s.take({"idx": list(range(first_idx, first_idx + GROUPS))})
    s.admit(gids, step=1, policy_version=0, rollouts=ROLLOUTS)
    for g in gids:
        loc = f"g{g}-r0-a0-p1.rows"
        acks.note(s.progress(g, 0, 0, rows_of(loc), tokens=96, policy_version=0))
    hold_first_rows(s, fs, GROUPS * ROLLOUTS - 1)
    at_once([lambda g=g, i=i: acks.note(s.seal(g, i, 0, rows_of(f"g{g}-r{i}-a0.rows"), policy_version=0))
             for g in gids for i in range(ROLLOUTS)])
    s.trained(gids, step=1)
    s.checkpoint(1, save=lambda: None)


def named_on_disk(journal_dir: str) -> set[str]:
    """Every locator a seal or a prefix on the active history names."""
    if not os.path.isdir(journal_dir) or not list_segments(journal_dir):
        return set()
    return {ref.locator for rec in Reader(journal_dir).records() for ev in rec.commit.events
            for ref in (ev.rollouts if type(ev) in (RolloutSealed, RolloutProgress) else ())}


def check(root: str, acks: list[tuple[int, str]], point: int | None = None) -> None:
    """The guarantees on `root` for a crash after `point` operations (None: after all of them);
    raises AssertionError naming what broke."""
    jdir, rdir = os.path.join(root, "journal"), os.path.join(root, "rows")
    named = named_on_disk(jdir)
    returned = [loc for at, loc in acks if point is None or at <= point]
    missing = sorted(set(returned) - named)
    assert not missing, f"calls returned but their commits are not on disk: {missing}"
    dp = LocalDataPlane(rdir)
    if named:
        for g in Reader(jdir).fold().groups():
            for loc in row_locators(g) + prefix_locators(g):
                assert deep_equal(dp.get(loc), rows_of(loc)), f"{loc}, named by the journal, does not read back"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        s = Session.open(jdir, data_plane=dp, compact_every=None)
    try:
        (g,) = s.take({"idx": [10_000]})
        s.admit([g], step=s.step or 1, rollouts=1)
        assert s.seal(g, 0, 0, rows_of("after")) in set(dp.locators())
    finally:
        s.close()
