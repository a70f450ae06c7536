"""A run moved to another disk, as docs/recovery.md ("A full disk: moving a run") says: a restart
on a full disk fails (`JournalError`) and leaves its unpublished segment; `cp -a` of the run
directory (journal, rows, weights) to a disk with space; the trainer started on the copy
restores the same checkpoint with the same work in flight, removes that leftover, goes on and
audits clean, and the original stays as it was."""

from __future__ import annotations

import errno
import os
import subprocess
import warnings

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from journal import JournalError, JournalWarning, layout
from replay import LocalDataPlane, Session, audit, durable_file

from tests.replay.test_session import DATASET, _generate_batch, _step, collate
from tests.support.faultfs import FaultFS, snapshot_tree


def _open(run: str, model: torch.nn.Module, **kw) -> Session:
    """The trainer's open, every path under its run directory `run`."""
    def load(step):
        with open(os.path.join(run, "ckpt", f"step_{step}.pt"), "rb") as f:
            model.load_state_dict(torch.load(f, weights_only=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)  # the first start says so
        return Session.open(os.path.join(run, "journal"), dataset=DATASET, collate_fn=collate,
                            loader=StatefulDataLoader(DATASET, batch_size=2, collate_fn=collate),
                            data_plane=LocalDataPlane(os.path.join(run, "rows")), load_weights=load, **kw)


def _save(run: str, model: torch.nn.Module, step: int) -> None:
    with durable_file(os.path.join(run, "ckpt", f"step_{step}.pt")) as f:
        torch.save(model.state_dict(), f)


def _unpublished(journal: str) -> list[str]:
    return [n for n in os.listdir(journal) if n.endswith(layout.SEGMENT_SUFFIX + layout.UNPUBLISHED_SUFFIX)]


def test_a_run_moved_with_cp_a_after_a_full_disk_goes_on_from_the_copy(fast_tmp):
    run, moved = str(fast_tmp / "disk1" / "run"), str(fast_tmp / "disk2" / "run")
    model = torch.nn.Linear(1, 1)
    with _open(run, model) as s:
        batches = s.batches()
        _step(s, batches, 1)
        in_flight = _generate_batch(s, batches, 2)   # finished, not trained: rows in the data plane
        s.checkpoint(1, save=lambda: _save(run, model, 1))
        _step(s, batches, 2)   # the dead tail
    # the restart on the full disk: its resume's first commit does not fit
    fs = FaultFS(root=os.path.join(run, "journal"))
    fs.inject("write", nth=2, error=errno.ENOSPC, persistent=True, path_contains=layout.UNPUBLISHED_SUFFIX)
    from journal import Journal
    from replay import restore
    with pytest.raises(JournalError, match="No space left"):
        Journal.open(os.path.join(run, "journal"), resume=restore(os.path.join(run, "journal")), fs=fs)
    assert len(_unpublished(os.path.join(run, "journal"))) == 1

    before = snapshot_tree(run)
    os.makedirs(os.path.dirname(moved))
    subprocess.run(["cp", "-a", run, moved], check=True)
    with _open(moved, model) as s:
        assert s.step == 1
        assert [w.group_id for w in s.resume_work if w.kind == "train"] == in_flight
        assert [len(s.rows(g)) for g in in_flight] == [2, 2]   # the copy's rows
        assert _unpublished(os.path.join(moved, "journal")) == []
        s.trained(in_flight, step=2)
        _step(s, s.batches(), 3)
        s.checkpoint(3, save=lambda: _save(moved, model, 3))
    assert audit(os.path.join(moved, "journal")).clean
    assert snapshot_tree(run) == before   # the original is as it was: nothing refers to its paths
