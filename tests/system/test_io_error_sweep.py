"""Issue 7.2: a stepped I/O-error sweep, as SQLite's "I/O error" tests do.

For N = 1, 2, 3, ... the N-th I/O operation (any kind: create, write, fsync,
truncate, close, rename, unlink, mkdir, rmtree, directory fsync) of one
operation fails with EIO, either once (*one-shot*) or from then on
(*persistent*), until the operation completes without reaching N. The
operations: appends across segment rotations (a transaction, a checkpoint), compaction
(retention "archive" and "delete", replacing an older cut), resume (`Journal.open(path, resume=restore(path))`, then close),
a resume with salvage that adopts a dead tail's takes (its first commit carries their loader
state, whose blob goes into the new branch's segment),
a rollout workload (seals and failures, alone and in transactions, across a rotation, a
compaction writing a cut with a rollout table, a resume whose first commit raises the
attempts of the unsealed rollouts) and
open-with-repair (a journal with a torn frame tail, and one whose newest
segment has a torn header; open, then close).

After every run either the operation succeeded, or it raised a documented
error (`JournalFailed`, a `JournalIOError` naming the file and operation (open, repair,
compaction; no half-written temporary cut or archive left after a one-shot fault), an
`OSError` from the seam carrying the injected EIO, a `RestoreError`), and then, on the directory as the failure left it:
`crash_oracle.check_journal` (strict reader, every acknowledged commit there
with its exact events, restore equal to the model, every cut reads), then the
operation again without faults succeeds, then the full check with a reopen
and an append. The number of error points is printed at the end of the module.
"""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from tests.support.crash_oracle import (Run, WrittenRows, adopting_first_commit, check_journal,
                                        dead_tail_of_takes, finished_groups_with_checkpoint, loader,
                                        resume_first_commit, rollout_groups)
from tests.support.faultfs import FaultFS
from journal import CheckpointCommitted, JournalFailed, JournalIOError, Reader
from replay import RestoreError, restore
from snapshot import compact

MAX_N = int(os.environ.get("OJ_SWEEP_MAX_N", "400"))
RESULTS: dict[str, tuple[int, int, int]] = {}  # name -> (error points, raised, completed runs)


# -- starting points -----------------------------------------------------------------------


def setup_compaction(run: Run) -> None:
    """A journal with rotated segments, two committed checkpoints and a cut of the first
    (so a compaction writes a cut, removes the old one and retires segments)."""
    j = run.open()
    done = finished_groups_with_checkpoint(run, j)
    j.close()
    compact(run.root, keep_cuts=1, retention=None, fs=run.fs)
    j = run.open()
    run.call(j, "trained", done[:3], step=2)
    for i in range(14, 22):
        g = run.taken(j, [i], loader(i))
        run.call(j, "admitted", g, target_step=3)
    run.call(j, "begin_checkpoint", step=2)
    run.call(j, "commit_checkpoint", step=2)
    run.call(j, "trained", done[3:5], step=3)
    j.close()


def setup_resume(run: Run) -> None:
    """A crashed run: checkpoint 2 committed, a dead tail after its begin, a torn last frame."""
    j = run.open()
    g = run.taken(j, [0, 1, 2], loader(0))
    run.call(j, "admitted", g, target_step=1)
    run.call(j, "begin_checkpoint", step=1)
    run.call(j, "commit_checkpoint", step=1)
    run.call(j, "finished", g[:2], policy_version=1, locators=["a", "b"])
    run.call(j, "trained", g[:1], step=2)
    run.call(j, "begin_checkpoint", step=2)
    g2 = run.taken(j, [3, 4], loader(1))
    run.call(j, "commit_checkpoint", step=2)
    run.call(j, "admitted", g2, target_step=3)
    j.close()
    _tear(run.root)


def _last_segment(root: str) -> str:
    return os.path.join(root, sorted(n for n in os.listdir(root) if n.endswith(".wal"))[-1])


def _tear(root: str) -> None:
    """A torn frame: half a frame header and garbage at the end of the last segment."""
    with open(_last_segment(root), "ab") as fh:
        fh.write(b"\x40\x00\x00\x00\x99\x88" + os.urandom(20))


def setup_torn_tail(run: Run) -> None:
    j = run.open()
    for i in range(6):
        g = run.taken(j, [i], loader(i))
        run.call(j, "admitted", g, target_step=i)
    run.call(j, "begin_checkpoint", step=1)
    run.call(j, "commit_checkpoint", step=1)
    j.close()
    _tear(run.root)


def setup_torn_header(run: Run) -> None:
    """The newest segment was created but only 20 bytes of its header reached the disk."""
    setup_torn_tail(run)
    last = _last_segment(run.root)
    with open(last, "rb") as fh:
        head = fh.read(64)
    name = os.path.basename(last)
    tl, first = name[:-4].split("-")
    lsn = max(l for (_, l) in run.expected) + 1
    with open(os.path.join(run.root, f"{tl}-{lsn:020d}.wal"), "wb") as fh:
        fh.write(head[:20])


# -- operations (each under a FaultFS with one armed fault) ---------------------------------


def op_compact(mode: str):
    def op(run: Run) -> None:
        compact(run.root, keep_cuts=1, retention=mode, fs=run.fs)
    return op


def _expect_first_commit(run: Run, rs, first: list, loaders: list = ()) -> None:
    """The timeline a resume from `rs` creates (or any a retry creates after a failed one) holds
    `first` and the restore's record as its first commit: complete once that commit is there,
    acknowledged or not (a failed open)."""
    top = max(Reader(run.root).timelines)
    for t in range(top + 1, top + 4):
        run.expected[(t, rs.lsn + 1)] = (list(first) + [rs.restored], list(loaders))
        run.branches.append((float("inf"), t, rs.lsn, True))


def op_resume(run: Run) -> None:
    rs = restore(run.root)
    first = [CheckpointCommitted(rs.step)] if rs.step is not None else []
    _expect_first_commit(run, rs, first)
    j = run.open(resume=rs)
    try:
        run.resumed(j, rs, first)
    finally:
        j.close()


def op_resume_adopting(run: Run) -> None:
    """A resume with salvage whose first commit adopts the dead tail's takes (the loader
    state's blob written into the new branch's first segment)."""
    rs = restore(run.root, salvage=True, data_plane=WrittenRows(run))
    first, loaders = adopting_first_commit(run, rs)
    _expect_first_commit(run, rs, first, loaders)
    j = run.open(resume=rs)
    try:
        run.resumed(j, rs, first, loaders)
    finally:
        j.close()


def op_open(run: Run) -> None:
    j = run.open()
    j.close()


def setup_small(run: Run) -> None:
    j = run.open()
    g = run.taken(j, [0, 1], loader(0))
    run.call(j, "admitted", g, target_step=1)
    j.close()


def op_appends(run: Run) -> None:
    """Appends that rotate segments twice, a transaction and a checkpoint, then close: a failed
    write or fsync must fail-stop (JournalFailed) with every acknowledged commit on disk."""
    j = run.open()
    try:
        base = 100 * (1 + len(run.acks))
        for i in range(6):
            g = run.taken(j, [base + i], loader(base + 4 * i))
            run.transaction(j, [("admitted", (g,), {"target_step": 2}),
                                ("finished", (g,), {"locators": ["x"]})])
        run.call(j, "begin_checkpoint", step=base)
        run.call(j, "commit_checkpoint", step=base)
    finally:
        j.close()


def setup_rollouts(run: Run) -> None:
    """Groups with partly sealed rollouts and a committed checkpoint, the segment nearly full."""
    j = run.open()
    rollout_groups(run, j, range(3), checkpoint_at=1)
    j.close()


def op_rollouts(run: Run) -> None:
    """Rollout seals and failures across a rotation and a checkpoint (and a dead tail after
    it), close, a compaction (a cut with a rollout table), a resume, close."""
    j = run.open()
    try:
        base = 100 * (1 + len(run.acks))
        rollout_groups(run, j, range(base, base + 3), checkpoint_at=base + 1)
    finally:
        j.close()
    compact(run.root, keep_cuts=1, retention="archive", fs=run.fs)
    rs = restore(run.root)
    first = resume_first_commit(run, rs)
    _expect_first_commit(run, rs, first)
    j = run.open(resume=rs)
    try:
        run.resumed(j, rs, first)
    finally:
        j.close()


SCENARIOS = {
    "appends-rotation": (setup_small, op_appends),
    "compact-archive": (setup_compaction, op_compact("archive")),
    "compact-delete": (setup_compaction, op_compact("delete")),
    "resume": (setup_resume, op_resume),
    "rollouts": (setup_rollouts, op_rollouts),
    "resume-adopting": (dead_tail_of_takes, op_resume_adopting),
    "open-repair-torn-frame": (setup_torn_tail, op_open),
    "open-repair-torn-header": (setup_torn_header, op_open),
}


def fork(base: Run, root: str) -> Run:
    """A copy of `base`'s directory with its record (every commit acknowledged before op 0)
    and a fresh FaultFS over the copy."""
    shutil.copytree(base.root, root, symlinks=True)
    run = Run(root, FaultFS(root=root), segment_bytes=base.segment_bytes)
    run.expected = dict(base.expected)
    run.acks = [(0, t, lsn) for (_, t, lsn) in base.acks]
    run.branches = [(0, t, b, r) for (_, t, b, r) in base.branches]
    return run


def documented(exc: BaseException, name: str) -> bool:
    if isinstance(exc, (JournalFailed, RestoreError)):
        return True
    if isinstance(exc, JournalIOError):  # naming the file and the operation
        return exc.errno == errno.EIO and bool(exc.path) and bool(exc.operation)
    if isinstance(exc, OSError):
        # the injected error itself, not a secondary one; compaction and retention wrap theirs
        return exc.errno == errno.EIO and not name.startswith("compact")
    return False


def half_written(root: str) -> list[str]:
    """Temporary files of a compaction that a failed one must have removed: unfinished cuts
    and archives (a cut being deleted may stay under its .tmp-del- name: nothing reads it)."""
    snapshots = os.path.join(root, "snapshots")
    names = [n for n in os.listdir(root) if n.endswith(".wal.zst.tmp")]
    if os.path.isdir(snapshots):
        names += [n for n in os.listdir(snapshots) if n.startswith(".tmp-cut-")]
    return names


def sweep(name: str, scratch: str) -> tuple[int, int, int, list[str]]:
    setup, op = SCENARIOS[name]
    base = Run(os.path.join(scratch, "base"))
    setup(base)
    points = raised = completed = 0
    failures: list[str] = []
    swallowed: list[str] = []
    for persistent in (False, True):
        for n in range(1, MAX_N + 1):
            root = os.path.join(scratch, f"{'p' if persistent else 'o'}{n}")
            run = fork(base, root)
            fault = run.fs.inject(None, nth=n, error=errno.EIO, persistent=persistent)
            where = f"{name} {'persistent' if persistent else 'one-shot'} N={n}"
            error = None
            try:
                op(run)
            except BaseException as exc:  # judged below
                error = exc
            if not fault.fired:
                if error is not None:
                    failures.append(f"{where}: failed without the fault: {error!r}")
                completed += 1
                try:
                    check_journal(root, run)
                except Exception as exc:
                    failures.append(f"{where} (no fault reached): {type(exc).__name__}: {exc}")
                shutil.rmtree(root, ignore_errors=True)
                break
            points += 1
            failed_op = next(o for o in run.fs.ops if o.failed)
            where += f" ({failed_op.kind} {os.path.relpath(failed_op.path, root)})"
            if error is None:
                swallowed.append(f"{where}")
            if error is not None:
                raised += 1
                if not documented(error, name):
                    failures.append(f"{where}: undocumented {type(error).__name__}: {error}")
                    shutil.rmtree(root, ignore_errors=True)
                    continue
                if not persistent and half_written(root):  # (persistent: the cleanup fails too)
                    failures.append(f"{where}: left {half_written(root)} behind")
            run.fs.clear_faults()
            try:
                check_journal(root, run, reopen=False)
                op(run)                      # the same operation, without faults, now succeeds
                check_journal(root, run)     # and leaves everything verified; reopen + append
            except Exception as exc:
                failures.append(f"{where} -> {error!r}: {type(exc).__name__}: {exc}")
            shutil.rmtree(root, ignore_errors=True)
        else:
            failures.append(f"{name}: still reaching the fault at N={MAX_N}")
    if swallowed:
        print(f"{name}: the operation completed although one of its I/O operations failed at: "
              + "; ".join(swallowed))
    return points, raised, completed, failures


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    yield
    if not RESULTS:
        return
    lines = ["I/O error sweep (operation: error points / raised / runs that completed):"]
    for name, (points, raised, completed) in RESULTS.items():
        lines.append(f"  {name:26s} {points:4d} / {raised:4d} / {completed}")
    lines.append(f"  {'total':26s} {sum(v[0] for v in RESULTS.values()):4d} error points")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_io_error_sweep(name, fast_tmp):
    points, raised, completed, failures = sweep(name, str(fast_tmp))
    RESULTS[name] = (points, raised, completed)
    print(f"{name}: {points} error points, {raised} raised, {len(failures)} failures")
    assert points > 0
    assert not failures, f"{len(failures)} error points broke a guarantee:\n" + "\n".join(failures[:12])
