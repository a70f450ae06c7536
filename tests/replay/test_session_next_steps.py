"""When a restart cannot simply go on, what a session user is told, followed to the end: a row
edited while in flight (`RowChanged` names the `Session.open` option that continues), rows the
data plane lost (a warning naming the groups regenerated), a damaged journal (`journal-inspect
rescue` prints the commands that put the rescued journal in place, then the same
`Session.open`). Each test does what the message says and finishes with a clean audit."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import warnings

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from journal import JournalCorrupt, JournalWarning, Reader, Taken
from replay import LocalDataPlane, RowChanged, RowChangedWarning, RowsRegeneratedWarning, Session, audit

from tests.replay.test_rescue import _flip
from tests.replay.test_session import DATASET, _generate, _step, collate
from tests.support.cli_run import cli


def _open(root, dataset=DATASET, **kw) -> Session:
    """The trainer's `Session.open` on the run in `root`, over `dataset`."""
    loader = StatefulDataLoader(dataset, batch_size=2, collate_fn=collate)
    return Session.open(str(root / "journal"), dataset=dataset, loader=loader, collate_fn=collate,
                        data_plane=LocalDataPlane(str(root / "rows")), **kw)


def _first_open(root, **kw) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)   # a first start says so
        return _open(root, **kw)


def _finish_resume_work(s: Session, step: int) -> None:
    """Admit, generate and train (as step `step`) every group the restore handed back."""
    admit = [w.group_id for w in s.resume_work if w.kind == "admit"]
    if admit:
        s.admit(admit, step=step, rollouts=2)
    for w in s.resume_work:
        if w.kind != "train":
            _generate(s, w.group_id, step)
    if s.resume_work:
        s.trained([w.group_id for w in s.resume_work], step=step)


def test_a_row_edited_while_in_flight_row_changed_says_how_to_go_on(fast_tmp):
    with _first_open(fast_tmp) as s:
        batches = s.batches()
        _step(s, batches, 1)
        gids = s.take(next(batches))   # in flight at the checkpoint
        s.checkpoint(1, save=lambda: None)
    idx = DATASET[2]["idx"]
    edited = [dict(r, x=99.0) if r["idx"] == idx else r for r in DATASET]
    with pytest.raises(RowChanged, match=rf"group {gids[0]}: dataset\[{idx}\] changed") as info:
        _open(fast_tmp, edited)
    option = re.search(r'Session\.open\(\.\.\., on_row_changed="(\w+)"\)', str(info.value)).group(1)
    with pytest.warns(RowChangedWarning, match=rf"group {gids[0]}: .*continuing with the row as it is now"):
        s = _open(fast_tmp, edited, on_row_changed=option)
    with s:
        assert [w.group_id for w in s.resume_work] == gids
        assert s.resume_work[0].prompt == collate([edited[idx]])   # what it trains on from now on
        _finish_resume_work(s, 2)
        _step(s, s.batches(), 3)
        s.checkpoint(3, save=lambda: None)
    with pytest.warns(RowChangedWarning, match=rf"dataset\[{idx}\]"):   # every restore says so
        _open(fast_tmp, edited, on_row_changed=option).close()
    assert audit(str(fast_tmp / "journal")).clean


def test_rows_the_data_plane_lost_are_regenerated_with_a_warning_naming_them(fast_tmp):
    with _first_open(fast_tmp) as s:
        batches = s.batches()
        _step(s, batches, 1)
        finished = s.take(next(batches))   # finished at the checkpoint: its rows in the data plane
        s.admit(finished, step=2, rollouts=2)
        for g in finished:
            _generate(s, g, 2)
        idx = sorted(s.journal.group(g).idx for g in finished)
        s.checkpoint(1, save=lambda: None)
    for pack in glob.glob(str(fast_tmp / "rows" / "**" / "*.pack"), recursive=True):
        os.unlink(pack)   # something deleted the data plane's files
    with pytest.warns(RowsRegeneratedWarning) as caught:
        s = _open(fast_tmp)
    (message,) = [str(w.message) for w in caught if w.category is RowsRegeneratedWarning]
    assert str(fast_tmp / "rows") in message and "generated again" in message
    with s:
        again = [w for w in s.resume_work if w.kind == "generate"]
        assert sorted(w.idx for w in again) == idx   # under new ids, to generate
        for old, w in zip(finished, again):
            assert f"{old}->{w.group_id} (idx {w.idx})" in message
        _finish_resume_work(s, 2)
        s.checkpoint(2, save=lambda: None)
    assert audit(str(fast_tmp / "journal")).clean


def test_a_damaged_journal_rescue_prints_the_session_open_to_run(fast_tmp):
    with _first_open(fast_tmp, compact_every=None) as s:
        batches = s.batches()
        for t in range(1, 5):
            _step(s, batches, t)
            if t % 2 == 0:
                s.checkpoint(t, save=lambda: None)
    journal = str(fast_tmp / "journal")
    ckpts = dict(Reader(journal).fold().committed_checkpoints)
    _flip(journal, next(r.commit.lsn for r in Reader(journal).records(start_lsn=ckpts[2] + 1)
                        if any(type(ev) is Taken for ev in r.commit.events)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)   # restore warns of the damage it reads past
        with pytest.raises(JournalCorrupt, match="journal-inspect rescue"):
            _open(fast_tmp)
    out = cli("rescue", journal, str(fast_tmp / "rescued")).stdout
    move = re.search(r"^  (mv .+)$", out, re.M).group(1)
    assert f"Session.open({journal!r}, ...)" in out, out
    subprocess.run(move, shell=True, check=True)   # as printed
    assert sorted(os.listdir(fast_tmp)) == ["journal", "journal.damaged", "rows"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RowsRegeneratedWarning)   # rows of the steps the rescue went back over
        s = _open(fast_tmp)   # the same call as before the damage
    with s:
        assert s.step == 2
        _finish_resume_work(s, 3)
        _step(s, s.batches(), 4)
        s.checkpoint(4, save=lambda: None)
    assert audit(journal).clean
    assert shlex.split(move)[1:3] == [journal, journal + ".damaged"]
