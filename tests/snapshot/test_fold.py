"""Issue 3, test 1: the cut at L equals the fold of the history up to L, whatever cuts exist.

For random legal histories (every event kind, transactions, checkpoint markers,
loader states with tensors/tuples/bytes, explicit group ids that leave holes),
random cuts are taken first, while the history is written (from the live
journal at "end", from disk at an LSN or at the latest checkpoint, with or
without archiving retention). Then `compact(path, at=L)` for a random L and
for "latest-checkpoint" must write a cut whose state, read back with
`read_cut`, equals the journal's own fold of commits 1..L: live records,
per-owner counts (terminal ones too), terminal owners, next group id,
pending/committed checkpoints, the loader state, and the anchor.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from journal import Journal
from snapshot import compact, read_cut
from snapshot.catalog import cut_dirs

from tests.support.nosync import NOSYNC
from tests.support.scratch import scratch_dir
from tests.support.snapshot_support import (HypothesisPicker, assert_same_state, committed_lsn, drive,
                                            reference_states)


def _earlier_cut(pick, path: str, j: Journal) -> None:
    kind = pick.choice(["end-live", "lsn", "latest-checkpoint"])
    retention = pick.choice([None, None, "archive"])
    keep = pick.int(1, 3)
    if kind == "end-live":
        compact(path, "end", journal=j, retention=retention, keep_cuts=keep, fs=NOSYNC)
    elif kind == "lsn":
        compact(path, pick.int(0, j.lsn), journal=j, retention=retention, keep_cuts=keep, fs=NOSYNC)
    else:
        compact(path, "latest-checkpoint", journal=j, retention=retention, keep_cuts=keep, fs=NOSYNC)


# no shrink phase: an example writes a journal and several cuts, so shrinking a failure took
# minutes; the falsifying draws are printed as generated
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(st.data())
def test_cut_at_lsn_equals_fold(data):
    pick = HypothesisPicker(data)
    with scratch_dir("oj-snap-fold-") as d:
        path = str(d)
        with Journal.open(path, sync="none", segment_bytes=4096, fs=NOSYNC) as j:
            model = None
            for _ in range(pick.int(1, 4)):
                model = drive(j, pick, pick.int(1, 15), model)
                if pick.bool(0.6):
                    _earlier_cut(pick, path, j)
        refs = reference_states(path)
        end = len(refs) - 1
        for _ in range(2):
            L = pick.int(0, end)
            result = compact(path, L, retention=pick.choice([None, "archive"]), fs=NOSYNC)
            assert result.lsn == L
            assert_same_state(read_cut(result.cut_path).state, refs[L], f"cut at LSN {L}")
        L = committed_lsn(refs[end])
        result = compact(path, "latest-checkpoint", retention=None, fs=NOSYNC)
        assert result.lsn == L
        assert_same_state(read_cut(result.cut_path).state, refs[L], f"cut at latest checkpoint {L}")
        assert all(not p.rsplit("/", 1)[-1].startswith(".tmp-") for _, _, p in cut_dirs(path))
