"""The crash states of seals and prefixes made durable with their rows as one step
(`replay/session/row_commits.py`), as tests/system/test_crash_states.py enumerates the
journal's and test_data_plane_crash_states.py the data plane's.

`tests/support/row_commit_runs.workload` runs a session whose journal and `LocalDataPlane`
write through one `FaultFS` (prefixes one at a time, 16 seals batched into one write of rows
and one journal fsync, the groups trained, a checkpoint deleting their rows), noting when each
call returned. `CrashStates` turns the recorded operations of both into crash states (every
prefix, volatile operations dropped, torn, reordered, names undone); `row_commit_runs.check`
holds each to the guarantees: every commit on disk names complete rows (the rows were durable
before the commit was written), every call that returned has its commit on disk, and a session
opens on the state and seals again.

CI checks a seeded sample (`OJ_CRASH_STATES_SAMPLE`, default 60); `OJ_CRASH_STATES_FULL=1`
checks every distinct state.
"""

from __future__ import annotations

import os

from tests.support.crash_states import CrashStates, failures_of
from tests.support.row_commit_runs import Acks, MeasuredFaultFS, check, open_session, workload

FULL = os.environ.get("OJ_CRASH_STATES_FULL") == "1"
SAMPLE = None if FULL else int(os.environ.get("OJ_CRASH_STATES_SAMPLE", "60"))
SEED = int(os.environ.get("OJ_CRASH_STATES_SEED", "7"))


def test_every_crash_state_keeps_the_calls_that_returned_and_names_only_durable_rows(fast_tmp):
    root = str(fast_tmp / "run")
    os.makedirs(root)
    fs = MeasuredFaultFS(root=root)
    acks = Acks(fs)
    s = open_session(root, fs)
    workload(s, fs, acks)
    s.close()
    assert len(acks.calls) == 20 and {"write", "fsync", "fsync_dir"} <= {o.kind for o in fs.ops}
    states = CrashStates(fs.baseline, fs.ops, root=root, seed=SEED).distinct(sample=SAMPLE, seed=SEED)
    failures = failures_of(states, str(fast_tmp), lambda img, state: check(img, acks.calls, state.point))
    print(f"row commits: {len(fs.ops)} ops, {states.produced} crash states produced, "
          f"{states.distinct} distinct, {len(states)} checked, {len(failures)} failed")
    assert len(states) >= min(SAMPLE or 0, states.distinct)
    assert not failures, f"{len(failures)} of {len(states)} crash states broke a guarantee:\n" + \
        "\n".join(failures[:5])
