"""`replay.Session`: the open sequence, `resume_work`, the loop's calls, checkpoints that
reclaim rows, and `stats()`. Restarts here close the session cleanly: a restart restores the
latest committed checkpoint whatever came after it, so a clean close and a crash after the
same commits restore the same state (tests/examples/test_minimal.py SIGKILLs a trainer)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from journal import GroupRef, Journal, JournalWarning, Owner, OwnershipError, Reader, StaleAttempt
from journal.events import Finished, RolloutSealed
from replay import (BatchShapeError, CheckpointUnsaved, LoadWeightsFailed, LocalDataPlane, NothingToRestore, Session,
                    SessionError, audit, restore)


DATASET = [{"idx": i, "task_name": ("a", "b")[i % 2], "x": float(i)} for i in range(10)]


def collate(rows):
    return {"idx": [r["idx"] for r in rows], "task_name": [r["task_name"] for r in rows],
            "x": torch.tensor([r["x"] for r in rows])}


class Run:
    """A run directory and the session options of a trainer on it."""

    def __init__(self, root, batch_size=2):
        self.jdir, self.rows = str(root / "journal"), str(root / "rows")
        self.batch_size = batch_size
        self.loaded: list[int] = []

    def open(self, **kw) -> Session:
        self.loader = StatefulDataLoader(DATASET, batch_size=self.batch_size, collate_fn=collate)
        opts = dict(dataset=DATASET, loader=self.loader, collate_fn=collate,
                    data_plane=LocalDataPlane(self.rows), load_weights=self.loaded.append)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)  # a first start warns
            return Session.open(self.jdir, **{**opts, **kw})


def _generate(s: Session, gid: int, step: int) -> None:
    for r in s.pending(gid):
        s.seal(gid, r.index, r.attempt, {"gid": gid, "index": r.index}, policy_version=step)


def _generate_batch(s: Session, batches, step: int) -> list[int]:
    """Take a batch, admit it, generate every rollout."""
    gids = s.take(next(batches))
    s.admit(gids, step=step, rollouts=2)
    for g in gids:
        _generate(s, g, step)
    return gids


def _step(s: Session, batches, step: int) -> list[int]:
    """Take a batch, admit it, generate every rollout, train it."""
    gids = _generate_batch(s, batches, step)
    s.trained(gids, step=step)
    return gids


def test_a_first_start_warns_naming_the_path_and_must_exist_refuses(fast_tmp):
    run = Run(fast_tmp)
    with pytest.raises(NothingToRestore, match="journal"):
        run.open(must_exist=True)
    assert not os.path.exists(run.jdir)  # nothing was created
    with pytest.warns(JournalWarning, match=run.jdir):
        Session.open(run.jdir, data_plane=LocalDataPlane(run.rows)).close()


def test_a_restart_restores_weights_loader_and_epoch(fast_tmp):
    """Ten rows, five batches a pass; a checkpoint after six batches (in the second pass), two
    more batches, a restart: it loads the weights of the checkpoint's step, goes on in the
    second pass, hands the two batches back to admit (adopted under fresh ids) and out again
    the rows after them, with ids above every id used before."""
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        taken = [_step(s, batches, t) for t in range(1, 7)]
        assert s.epoch == 1
        s.checkpoint(6, save=lambda: None)
        after = [next(batches) for _ in range(2)]
        after_ids = [s.take(b) for b in after]
        following = next(batches)["idx"]
    assert run.loaded == []
    with run.open() as s:
        assert (s.step, s.epoch, run.loaded) == (6, 1, [6])
        # taken after the checkpoint: adopted, to admit, in the order they were taken
        assert [(w.kind, w.idx) for w in s.resume_work] == [("admit", i) for b in after for i in b["idx"]]
        assert s.stats()["restored"]["adopted"] == 4
        gids = s.take(next(s.batches()))
        assert s.journal.group(gids[0]).idx == following[0]  # the loader goes on after them
        old = [g for b in taken + after_ids for g in b]
        assert min(w.group_id for w in s.resume_work) > max(old)  # ids never reused
        assert min(gids) > max(w.group_id for w in s.resume_work)
        assert s.journal.group(gids[0]).epoch == 1
    report = audit(run.jdir)
    assert report.totals["trained_more_count"] == 0 and report.totals["lost_count"] == 0


def test_the_loader_goes_on_where_the_checkpoint_left_it_without_salvage(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        for t in range(1, 3):
            _step(s, batches, t)
        s.checkpoint(2, save=lambda: None)
        expected = next(batches)  # what comes after the checkpoint's last take
        s.take(expected)
    with run.open(salvage=False) as s:  # nothing adopted: the take after it is the loader's again
        assert s.resume_work == []
        again = next(s.batches())
    assert again["idx"] == expected["idx"]


def test_resume_work_lists_train_generate_admit_in_order_and_nothing_stalls(fast_tmp):
    """At the checkpoint: group A finished (REPLAY), B with one of two rollouts sealed, C with
    both sealed but never finished (journaled by hand), D reserved, E spare. The restart hands
    back A and C to train, B to generate (only its unsealed rollout, at a fenced attempt), D to
    admit, E as a spare; every "generate" item has a rollout to generate."""
    run = Run(fast_tmp, batch_size=5)
    with run.open() as s:
        a, b, c, d, e = s.take(next(s.batches()))
        s.divert([e])
        s.admit([b, c], step=2, rollouts=2)
        s.admit([a], step=1, rollouts=2)
        _generate(s, a, 1)
        s.seal(b, 0, 0, {"b": 0})
        with s.journal.transaction() as tx:  # sealed by the journal alone: never finished
            from journal import RolloutRef
            tx.rollout_sealed([RolloutRef(c, 0, 0, s.data_plane.put_rollout(c, 0, 0, {"c": 0})),
                               RolloutRef(c, 1, 0, s.data_plane.put_rollout(c, 1, 0, {"c": 1}))])
        s.checkpoint(1, save=lambda: None)
    with run.open() as s:
        kinds = [(w.kind, w.group_id) for w in s.resume_work]
        assert kinds == [("train", a), ("train", c), ("generate", b), ("admit", d)]
        assert s.spares == [e]
        gen = s.resume_work[2]
        assert [(r.index, r.sealed) for r in gen.rollouts] == [(0, True), (1, False)]
        assert [r.index for r in gen.pending] == [1] and gen.pending[0].attempt >= 1
        assert [r.index for r in s.pending(b)] == [1]
        assert all(w.pending for w in s.resume_work if w.kind == "generate")
        assert s.journal.owner_of(c) == Owner.REPLAY
        assert s.rows(c) == [{"c": 0}, {"c": 1}]
        assert s.resume_work[0].prompt["idx"] == [DATASET[0]["idx"]]
        assert s.stats()["restored"]["rollouts_kept"] == 2 + 2 + 1


def test_seal_stores_rows_first_and_the_last_seal_finishes_the_group(fast_tmp):
    run = Run(fast_tmp)
    order = []

    class Recording(LocalDataPlane):
        def store_batch(self, items):   # the session stores a seal's rows in a batch
            order.extend(("put", locator, s.journal.lsn) for locator, _ in items)
            return super().store_batch(items)

    with run.open(data_plane=Recording(run.rows)) as s:
        gid, _ = s.take(next(s.batches()))
        s.admit([gid], step=1, rollouts=2)
        first = s.seal(gid, 0, 0, {"r": 0})
        assert s.journal.owner_of(gid) == Owner.ADMITTED
        s.seal(gid, 1, 0, {"r": 1})
        assert s.journal.owner_of(gid) == Owner.REPLAY
        lsn = s.journal.lsn
    # each put happened before the commit that names its locator
    assert [o[2] for o in order] == [lsn - 2, lsn - 1]
    last = list(Reader(run.jdir).records())[-1].commit.events
    assert [type(e) for e in last] == [RolloutSealed, Finished]
    assert LocalDataPlane(run.rows).has(first)


def test_a_late_attempt_is_refused_and_its_rows_deleted_a_duplicate_keeps_its_rows(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        gid, _ = s.take(next(s.batches()))
        s.admit([gid], step=1, rollouts=2)
        assert s.fail(gid, 0, 0, reason="timeout") == 1
        lsn = s.journal.lsn
        with pytest.raises(StaleAttempt):
            s.seal(gid, 0, 0, {"late": True})
        assert s.journal.lsn == lsn
        assert not any("-r0-a0" in loc for loc in s.data_plane.locators())
        kept = s.seal(gid, 0, 1, {"r": 0})
        with pytest.raises(OwnershipError, match="already sealed"):
            s.seal(gid, 0, 1, {"r": 0})   # a duplicate delivery of the same result
        assert s.data_plane.has(kept)


def test_take_reads_rows_from_every_batch_shape_or_a_key(fast_tmp):
    """(Without a collate_fn the columns of a mapping batch are not checked against one:
    tests/replay/test_session_take.py checks batches.)"""
    run = Run(fast_tmp)
    with run.open(collate_fn=None) as s:
        assert len(s.take({"idx": torch.tensor([3, 4]), "task_name": ["b", "a"]})) == 2
        assert len(s.take([DATASET[5], DATASET[6]])) == 2
        with pytest.raises(BatchShapeError, match="key="):
            s.take(torch.tensor([1, 2]))
        with pytest.raises(BatchShapeError, match="task_name"):
            s.take({"idx": [1, 2], "task_name": ["a"]})
    with run.open(key=lambda batch: [(int(i), None) for i in batch]) as s:
        gids = s.take(torch.tensor([7, 8]))
        assert [(g.idx, g.task_name) for g in map(s.journal.group, gids)] == [(7, None), (8, None)]


def test_200_checkpoints_keep_the_data_plane_to_the_live_rows(fast_tmp):
    """Generation runs a step ahead of training: at checkpoint t the groups of step t+1 are
    finished (their rows live), those of step t trained. Each checkpoint deletes the rows of
    the groups trained before it, so across 200 checkpoints the data plane holds only rows the
    live groups name; rows of groups trained after a checkpoint stay (a restart restores that
    checkpoint and trains them again, from their rows). Compaction runs in the background."""
    run = Run(fast_tmp)
    dp = LocalDataPlane(run.rows)
    s = run.open(data_plane=dp, compact_every=10, sync="none")
    batches = s.batches()
    ahead = _generate_batch(s, batches, 1)
    compactions = 0
    try:
        for t in range(1, 201):
            s.trained(ahead, step=t)
            ahead = _generate_batch(s, batches, t + 1)
            s.checkpoint(t, save=lambda: None)
            live = {loc for g in s.journal.groups() for loc in (g.rollouts.locators if g.rollouts else ())}
            assert set(dp.locators()) == live and len(live) == 4, t
            if t % 50 == 0:   # a restart after training that no checkpoint covers
                s.trained(ahead, step=t + 1)
                s.close()   # waits for the compaction running in the background
                compactions += s.stats()["compactions"]
                s = run.open(data_plane=dp, compact_every=10, sync="none")
                batches = s.batches()
                assert [(w.kind, w.group_id) for w in s.resume_work] == [("train", g) for g in ahead]
                assert set(dp.locators()) == live   # kept for the groups trained again
    finally:
        s.close()
    compactions += s.stats()["compactions"]
    assert compactions >= 4   # each of the four sessions that checkpoint (its tenth checkpoint's at least)
    assert restore(run.jdir).base_cut is not None


def test_a_failed_save_leaves_the_checkpoint_uncommitted_and_its_rows(fast_tmp):
    """Groups generated before checkpoint 1 and trained after it: a checkpoint 2 whose save
    fails deletes none of their rows, and a restart restores step 1 and hands them back to
    train, with their rows."""
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        _step(s, batches, 1)
        gids = s.take(next(batches))
        s.admit(gids, step=2, rollouts=2)
        for g in gids:
            _generate(s, g, 2)
        s.checkpoint(1, save=lambda: None)
        s.trained(gids, step=2)
        rows = set(s.data_plane.locators())
        assert len(rows) == 4

        def broken():
            raise OSError("disk full")
        with pytest.raises(OSError, match="disk full"):
            s.checkpoint(2, save=broken)
        assert set(s.data_plane.locators()) == rows
        with pytest.raises(SessionError, match="step-2 checkpoint .* failed to save"):
            s.checkpoint(3, save=lambda: None)   # another step cannot begin in this process
    with run.open() as s:
        assert s.step == 1
        assert [(w.kind, w.group_id) for w in s.resume_work] == [("train", g) for g in gids]
        assert {loc for g in gids for loc in s.locators_of(g)} == rows
        assert [len(s.rows(g)) for g in gids] == [2, 2]


def test_a_failed_save_is_saved_again_and_committed_and_training_waits_for_it(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        gids = _step(s, batches, 1)
        attempts = []

        def flaky():
            attempts.append(1)
            if len(attempts) == 1:
                raise OSError("transient")
        with pytest.raises(OSError):
            s.checkpoint(1, save=flaky)
        lsn = s.checkpoint(1, save=flaky)   # saved again: the same begin is committed
        assert s.step == 1 and len(attempts) == 2
        assert not any(loc.startswith(f"g{g}-") for g in gids for loc in s.data_plane.locators())
        _step(s, batches, 2)
        with pytest.raises(OSError):
            s.checkpoint(2, save=lambda: (_ for _ in ()).throw(OSError("again")))
        with pytest.raises(CheckpointUnsaved, match=r"trained\(step=3\)"):
            _step(s, batches, 3)   # training on would leave the step-2 begin unable to match the weights
    with run.open() as s:
        assert s.step == 1 and s.restored.lsn == lsn


def test_weights_that_do_not_load_stop_the_open_naming_the_step(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        _step(s, s.batches(), 1)
        s.checkpoint(1, save=lambda: None)

    def missing(step):
        raise FileNotFoundError(f"ckpt/step_{step}.pt")
    with pytest.raises(LoadWeightsFailed, match=r"step 1 .*ckpt/step_1\.pt"):
        run.open(load_weights=missing)
    with run.open() as s:   # nothing was written: the same state opens
        assert s.step == 1


def test_calls_without_a_data_plane_say_what_is_missing(fast_tmp):
    run = Run(fast_tmp)
    with run.open(data_plane=None) as s:
        gid, _ = s.take(next(s.batches()))
        s.admit([gid], step=1, rollouts=1)
        with pytest.raises(SessionError, match="data_plane="):
            s.seal(gid, 0, 0, {})


def test_stats_report_owners_commits_fsyncs_and_the_restore(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        _step(s, batches, 1)
        s.checkpoint(1, save=lambda: None)
        gid = s.take(next(batches))[0]
        st = s.stats()
    assert st["owners"]["trained"] == 2 and st["owners"]["reserved"] == 2
    assert st["commits"] == s.journal.lsn and st["fsyncs"] >= st["commits"]
    assert st["fsync_p50_ms"] is not None and st["fsync_p99_ms"] >= st["fsync_p50_ms"]
    assert st["rows_reclaimed"] == 4 and st["step"] == 1
    with run.open() as s:
        st = s.stats()
    assert st["restored"]["step"] == 1 and st["commits"] <= 1
    del gid


def test_group_level_groups_finish_with_their_rows(fast_tmp):
    run = Run(fast_tmp)
    with run.open() as s:
        batches = s.batches()
        gid, other = s.take(next(batches))
        s.admit([gid, other], step=1)
        loc = s.finish(gid, {"whole": torch.arange(3)})
        assert s.journal.owner_of(gid) == Owner.REPLAY
        assert torch.equal(s.rows(gid)[0]["whole"], torch.arange(3))
        s.replace(other, s.take(next(batches), divert=True)[0], reason="failed", step=1)
        assert s.journal.owner_of(other) == Owner.DROPPED
        assert s.data_plane.has(loc)


def test_the_journal_alone_cannot_be_opened_twice_by_sessions(fast_tmp):
    from journal import JournalLocked
    run = Run(fast_tmp)
    with run.open():
        with pytest.raises(JournalLocked):
            run.open()


def test_restore_of_a_low_level_journal_by_a_session(fast_tmp):
    """A journal written with the low-level API opens in a session (the epoch unknown: 0)."""
    run = Run(fast_tmp)
    with Journal.open(run.jdir) as j:
        (g,) = j.taken([GroupRef(idx=1)], loader_state=None)
        j.begin_checkpoint(step=3)
        j.commit_checkpoint(step=3)
    with run.open() as s:
        assert (s.step, s.epoch, [(w.kind, w.group_id) for w in s.resume_work]) == (3, 0, [("admit", g)])
