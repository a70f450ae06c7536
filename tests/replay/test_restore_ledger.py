"""The row ledger a restore hands a resume (`RecoveredState.ledger`) is computed on first use:
a restore reads the tail after its cut once (the fold that finds the point), and only a resume
that seeds a base cut pays the second read. What it computes is the ledger at the point, and
never one of another history: a journal changed since the restore gives None."""

from __future__ import annotations

import collections
import shutil

from journal import GroupRef, Journal, Reader
from replay import restore
from snapshot import compact, read_cut
from snapshot.row_ledger import RowLedger, ledger_at
from tests.support.segment_reads import spy_segment_reads


def _journal(path: str, idx0: int = 0) -> int:
    """A cut at step 1, a tail over many small segments to the checkpoint of step 2 (the restore
    point, after the cut), then a dead tail. Returns the restore point's LSN."""
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for step in (1, 2):
            for i in range(120):
                (g,) = j.taken([GroupRef(idx=idx0 + step * 1000 + i, task_name="t", epoch=0)])
                j.admitted([g], target_step=step)
                if i % 3:
                    j.finished([g], locators=[f"rows/{g}"])
                    j.trained([g], step=step)
                elif i % 2:
                    j.discarded([g], reason=f"filtered {step}")
            lsn = j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
            if step == 1:
                j.flush()
                compact(path, retention=None)
        j.taken([GroupRef(idx=idx0 + 9000 + i) for i in range(5)])
    return lsn


def _same_ledger(a: RowLedger, b: RowLedger) -> bool:
    def rows(ledger):
        return {key: tuple((bytes(getattr(r, n).dense).rstrip(b"\0"), getattr(r, n).sparse)
                           for n in ("taken", "trained", "dropped")) for key, r in ledger.tables.items()}
    return (a.lsn, a.groups, a.rollouts, a.reasons, rows(a)) == (b.lsn, b.groups, b.rollouts, b.reasons,
                                                                 rows(b))


def test_restore_reads_the_tail_after_its_cut_once(fast_tmp, monkeypatch):
    path = str(fast_tmp / "j")
    lsn = _journal(path)
    r = Reader(path)
    cut_lsn = max(int(c.name.split("-")[-1]) for c in (fast_tmp / "j" / "snapshots").iterdir())
    tail = [s.name for s in r.segments if s.first_lsn > cut_lsn]
    assert len(tail) >= 3
    seen = spy_segment_reads(monkeypatch)
    state = restore(path)
    assert state.lsn == lsn and state.base_cut is not None
    reads = collections.Counter(seen)
    assert all(reads[name] == 1 for name in tail), dict(reads)


def test_the_ledger_on_first_use_is_the_ledger_at_the_point_and_seeds_a_base_cut(fast_tmp):
    path = str(fast_tmp / "j")
    lsn = _journal(path)
    state = restore(path)
    base = read_cut(state.base_cut)
    assert base.lsn < lsn
    expected = ledger_at(Reader(path), [base], Reader(path).fold(stop_lsn=lsn))
    assert expected is not None and expected.lsn == lsn
    assert _same_ledger(state.ledger, expected)
    assert state.ledger is state.ledger  # computed once
    elsewhere = str(fast_tmp / "elsewhere")
    with Journal.open(elsewhere, resume=state, sync="none"):
        pass
    (cut_dir,) = (fast_tmp / "elsewhere" / "snapshots").iterdir()
    seeded = RowLedger.of_cut(read_cut(str(cut_dir)))
    assert seeded is not None and _same_ledger(seeded, expected)


def test_a_ledger_first_asked_for_after_the_journal_changed_is_none(fast_tmp):
    path = str(fast_tmp / "j")
    lsn = _journal(path)
    state = restore(path)
    shutil.rmtree(path)
    assert _journal(path, idx0=50_000) == lsn  # another history, the same LSNs
    assert state.ledger is None
    gone = restore(path)
    shutil.rmtree(path)
    assert gone.ledger is None
