"""The row ledger's token figures (version 2) in a cut: they read back as written, and a ledger of
version 1 (written before prefixes existed) reads with them at 0."""

from __future__ import annotations

import pytest

from journal import GroupRef, Journal, Reader, RolloutRef
from snapshot import CorruptRecord
from snapshot.row_ledger import LEDGER_VERSION, RowLedger


def _ledger(path: str) -> tuple[RowLedger, object]:
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.admitted([g], target_step=1, rollouts=2)
        j.rollout_progress(RolloutRef(g, 0, 0, "p"), tokens=12)
        with j.transaction() as tx:  # what a resume writes: the fence, the prefix carried
            tx.rollout_failed([RolloutRef(g, 0, 0), RolloutRef(g, 1, 0)], reason="abandoned_on_restore")
            tx.rollout_progress(RolloutRef(g, 0, 1, "p"), tokens=12)
        j.rollout_progress(RolloutRef(g, 1, 1, "q"), tokens=5)
        j.rollout_failed([RolloutRef(g, 1, 1)], reason="abandoned_on_restore")
        state = j.state_copy()
    ledger = RowLedger()
    for rec in Reader(path).records():
        ledger.add(rec.commit)
    return ledger, state


def test_token_figures_round_trip_and_version_1_reads_with_zeros(fast_tmp):
    ledger, state = _ledger(str(fast_tmp / "j"))
    assert (ledger.rollouts["tokens_kept"], ledger.rollouts["tokens_regenerated"]) == (12, 5)
    assert LEDGER_VERSION == 2
    back = RowLedger.decode(ledger.encode(), "here", state)
    assert back.rollouts == ledger.rollouts
    old = ledger.encode()
    old["version"] = 1
    old["rollouts"] = {k: v for k, v in old["rollouts"].items() if not k.startswith("tokens_")}
    assert RowLedger.decode(old, "here", state).rollouts["tokens_kept"] == 0
    old["version"] = 3
    with pytest.raises(CorruptRecord, match="version 1 or 2"):
        RowLedger.decode(old, "here", state)
