"""The data plane's I/O-error sweep, as tests/system/test_io_error_sweep.py sweeps the journal's.

For N = 1, 2, 3, ... the N-th I/O operation (any kind: create, write, fsync, truncate, close,
rename, unlink, directory fsync) of `data_plane_runs.workload` (puts across pack rotations, a
group commit, deletes that reclaim packs, an import, a save) fails with EIO, once (one-shot)
or from then on (persistent), until the workload completes without reaching N. The workload
starts on a directory that already holds rows in settled packs, so reclaiming compacts them.

After every run either the workload completed (only a failed seal or close of a pack being
retired, whose rows were all fsynced, goes unreported), or it raised `DataPlaneIOError` naming the
file and the step, with the EIO (nothing else), and a put that raised is not listed by the
data plane it raised in. Then, faults cleared, on the directory as the failure left it: the
same data plane object takes the rest of the work (the workload again), and
`data_plane_runs.check` holds the directory to the guarantees: every row whose put returned
is listed (unless its delete had begun), every listed row reads back exactly (a put that
raised may have left its rows whole, never in part), new puts and deletes work.
"""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from replay import DataPlaneIOError, LocalDataPlane
from replay.data_plane import pack_writer
from tests.support.data_plane_runs import Record, check, make_cut, pack_bytes, rows_of, workload
from tests.support.faultfs import FaultFS
from tests.support.sweeps import retiring, sweep


def _base(scratch: str) -> str:
    """A directory holding rows of a finished writer (settled packs, a few rows dead)."""
    root = os.path.join(scratch, "base")
    dp = LocalDataPlane(root)
    locs = [dp.put(g, rows_of(f"g{g}.rows")) for g in range(1000, 1010)]
    dp.delete(locs[:3])
    dp.close()
    return root


@pytest.mark.parametrize("persistent", [False, True], ids=["one-shot", "persistent"])
def test_every_failing_operation_raises_cleanly_and_leaves_a_usable_data_plane(fast_tmp, monkeypatch,
                                                                               persistent):
    monkeypatch.setattr(pack_writer, "PACK_BYTES", pack_bytes())
    scratch = str(fast_tmp)
    base, cut = _base(scratch), make_cut(os.path.join(scratch, "cut"))
    before = set(LocalDataPlane(base).locators())

    def run_at(n: int, failures: list[str]) -> bool:
        root = os.path.join(scratch, f"n{n}")
        shutil.copytree(base, root)
        fs = FaultFS(root=root)
        rec = Record(fs)
        dp = LocalDataPlane(root, fs=fs)
        fault = fs.inject(None, nth=n, error=errno.EIO, persistent=persistent)
        where = f"N={n}"
        error = None
        try:
            workload(dp, rec, cut, os.path.join(scratch, f"saved{n}"))
        except Exception as exc:  # judged below
            error = exc
        if not fault.fired:
            assert error is None, f"{where}: failed without the fault: {error!r}"
            dp.close()
            check(root, rec)
            return False
        failed = next(o for o in fs.ops if o.failed)
        where += f" ({failed.kind} {os.path.basename(failed.path)})"
        if error is None:
            if not retiring(fs, failed):
                failures.append(f"{where}: the workload completed although an operation failed")
        elif not (isinstance(error, DataPlaneIOError) and error.errno == errno.EIO and dp.root in str(error)):
            failures.append(f"{where}: undocumented {type(error).__name__}: {error}")
        else:
            half = set(dp.locators()) - before - {loc for _, loc in rec.puts}
            if half:
                failures.append(f"{where}: rows of a put that raised are listed: {half}")
        fs.clear_faults()
        try:
            workload(dp, rec, cut, os.path.join(scratch, f"again{n}"), base=100)  # the same object goes on
            dp.close()
            check(root, rec)
        except Exception as exc:
            failures.append(f"{where} -> {error!r}: afterwards {type(exc).__name__}: {exc}")
        shutil.rmtree(root, ignore_errors=True)
        return True

    sweep(f"data plane I/O-error sweep ({'persistent' if persistent else 'one-shot'})", run_at)
