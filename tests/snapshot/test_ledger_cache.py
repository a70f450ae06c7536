"""A live writer's compactions build each cut's row ledger from the previous one's (only the
commits since are folded): the ledger a cut carries equals one folded from LSN 1."""

from __future__ import annotations

import torch

from journal import GroupRef, Journal, Reader
from snapshot import compact, read_cut
from snapshot.row_ledger import RowLedger, ledger_at


def _plain(value):
    """The ledger's encoding with tensors as lists, to compare two by value."""
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def test_each_cut_of_a_live_writer_carries_the_ledger_of_its_whole_history(tmp_path):
    path = str(tmp_path / "j")
    with Journal.open(path, sync="none") as j:
        for step in range(1, 4):
            gids = j.taken([GroupRef(idx=step * 10 + i, epoch=0) for i in range(5)])
            j.admitted(gids, target_step=step)
            j.finished(gids[:4], locators=[f"dp/{g}" for g in gids[:4]])
            j.trained(gids[:3], step=step)
            j.discarded(gids[4:], reason="rollout_failed")
            cut = read_cut(compact(path, at="end", journal=j, retention=None).cut_path)
            carried = RowLedger.of_cut(cut)
            folded = ledger_at(Reader(path), (), cut.state)  # from LSN 1, no cut, no cache
            assert carried is not None and carried.lsn == cut.lsn == folded.lsn
            assert _plain(carried.encode()) == _plain(folded.encode())
