"""The data plane's crash states, as tests/system/test_crash_states.py enumerates the journal's.

`tests/support/data_plane_runs.workload` runs a `LocalDataPlane` through `FaultFS` (puts across
pack rotations, a group commit of four puts, deletes that remove and compact packs, an import,
a save), noting when each put returned. `CrashStates` turns the recorded operations into crash
states: every prefix, each volatile operation dropped, writes torn at 512 B / 4 KiB with the
rest missing, zeroed or garbage, reorders in one fsync window, renames and unlinks undone.
Each distinct state is written to a scratch directory and `data_plane_runs.check` holds it to
the guarantees: every row whose put returned is listed (unless its delete had begun), every
listed row reads back exactly, and the directory takes new puts and deletes to empty.

CI checks a seeded sample (`OJ_CRASH_STATES_SAMPLE`, default 60); `OJ_CRASH_STATES_FULL=1`
checks every distinct state.
"""

from __future__ import annotations

import os

from replay import LocalDataPlane
from replay.data_plane import pack_writer
from tests.support.crash_states import CrashStates, failures_of
from tests.support.data_plane_runs import Record, check, make_cut, pack_bytes, workload
from tests.support.faultfs import FaultFS

FULL = os.environ.get("OJ_CRASH_STATES_FULL") == "1"
SAMPLE = None if FULL else int(os.environ.get("OJ_CRASH_STATES_SAMPLE", "60"))
SEED = int(os.environ.get("OJ_CRASH_STATES_SEED", "7"))


def test_every_crash_state_keeps_the_rows_whose_put_returned(fast_tmp, monkeypatch):
    monkeypatch.setattr(pack_writer, "PACK_BYTES", pack_bytes())
    root = str(fast_tmp / "rows")
    os.makedirs(root)
    fs = FaultFS(root=root)
    rec = Record(fs)
    workload(LocalDataPlane(root, fs=fs), rec, make_cut(str(fast_tmp / "cut")), str(fast_tmp / "saved"))
    kinds = {o.kind for o in fs.ops}
    assert {"create", "rename", "write", "fsync", "fsync_dir", "unlink"} <= kinds
    states = CrashStates(fs.baseline, fs.ops, root=root, seed=SEED).distinct(sample=SAMPLE, seed=SEED)
    failures = failures_of(states, str(fast_tmp), lambda img, state: check(img, rec, state.point))
    print(f"data plane: {len(fs.ops)} ops, {states.produced} crash states produced, "
          f"{states.distinct} distinct, {len(states)} checked, {len(failures)} failed")
    assert len(states) >= min(SAMPLE or 0, states.distinct)
    assert not failures, f"{len(failures)} of {len(states)} crash states broke a guarantee:\n" + \
        "\n".join(failures[:5])
