"""The I/O-error sweep of seals and prefixes made durable with their rows as one step
(`replay/session/row_commits.py`), as tests/system/test_io_error_sweep.py sweeps the journal's
and test_data_plane_io_errors.py the data plane's.

For N = 1, 2, 3, ... the N-th I/O operation (any kind, of the journal or of the data plane) of
`row_commit_runs.workload`, on a session opened through one `FaultFS`, fails with EIO, once
(one-shot) or from then on (persistent), until the workload completes without reaching N.
After every run either the workload completed (a failed delete of rows no commit names is
warned, not raised; a failed seal of a retired pack goes unreported), or it raised what the
path documents: `DataPlaneIOError` (the rows of a batch not stored, nothing journaled for it)
or `JournalFailed` (the journal is fail-stop). Then, faults cleared, on the directory as the
failure left it, `row_commit_runs.check`: every call that returned has its commit on disk,
every commit names complete rows, and a session opens on it and seals again.
"""

from __future__ import annotations

import errno
import os
import shutil
import warnings

import pytest

from journal import JournalFailed, JournalWarning
from replay import DataPlaneIOError
from tests.support.row_commit_runs import Acks, MeasuredFaultFS, check, open_session, workload
from tests.support.sweeps import retiring, sweep


@pytest.mark.parametrize("persistent", [False, True], ids=["one-shot", "persistent"])
def test_every_failing_operation_raises_cleanly_and_keeps_what_returned(fast_tmp, persistent):
    def run_at(n: int, failures: list[str]) -> bool:
        root = str(fast_tmp / f"n{n}")
        os.makedirs(root)
        fs = MeasuredFaultFS(root=root)
        acks = Acks(fs)
        s = open_session(root, fs)
        fault = fs.inject(None, nth=n, error=errno.EIO, persistent=persistent)
        where, error = f"N={n}", None
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", JournalWarning)
            try:
                workload(s, fs, acks)
            except Exception as exc:  # judged below
                error = exc
        fs.clear_faults()
        try:
            s.close()
        except JournalFailed:
            pass
        if not fault.fired:
            assert error is None, f"{where}: failed without the fault: {error!r}"
            check(root, acks.calls)
            return False
        failed = next(o for o in fs.ops if o.failed)
        where += f" ({failed.kind} {os.path.relpath(failed.path, root)})"
        if error is None:
            if not (retiring(fs, failed) or any("could not be deleted" in str(w.message) for w in warned)):
                failures.append(f"{where}: the workload completed although an operation failed")
        elif not isinstance(error, (DataPlaneIOError, JournalFailed)) or \
                (isinstance(error, DataPlaneIOError) and error.errno != errno.EIO):
            failures.append(f"{where}: undocumented {type(error).__name__}: {error}")
        try:
            check(root, acks.calls)
        except Exception as exc:
            failures.append(f"{where} -> {error!r}: afterwards {type(exc).__name__}: {exc}")
        shutil.rmtree(root, ignore_errors=True)
        return True

    sweep(f"row commits I/O-error sweep ({'persistent' if persistent else 'one-shot'})", run_at)
