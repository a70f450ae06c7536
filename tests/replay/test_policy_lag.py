"""Work of weights that died with a crash, kept within the trainer's own lag bound (DESIGN 14):
`restore(..., max_policy_lag=k)` and `Session.open(..., max_policy_lag=k)` keep sealed rollouts,
finished groups and prefixes whose newest policy version is at most the restored step plus k;
each item says how it was made (`policy_span`, `lead`); what the bound refuses is named with
its version and the bound; a result recorded without a version is read as made by its
admission's weights; a second crash before the next checkpoint hands the same work back."""

from __future__ import annotations

import warnings

import pytest

from journal import GroupRef, Journal, JournalWarning, Owner, Progress, RolloutRef, StaleAttempt
from replay import LocalDataPlane, Session, SessionError, restore, verify
from snapshot import compact, read_cut
from tests.support.replay_support import FakeDataPlane

S = 5  # the restored checkpoint's step


@pytest.fixture
def newer_work(fast_tmp):
    """Group a (rollouts=4) and b (without rollouts=) admitted by weights S before the step-S
    checkpoint. On the dead tail: a's rollouts 0, 1, 2 sealed by weights S+1, S+2, S+3, rollout
    3's prefix (40 tokens) by S+2; b finished by S+1."""
    path, dp = str(fast_tmp / "j"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        a, b = j.taken([GroupRef(idx=0), GroupRef(idx=1)], loader_state={"pos": 2})
        j.admitted([a], target_step=S + 1, policy_version=S, rollouts=4)
        j.admitted([b], target_step=S + 1, policy_version=S)
        j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        for i, v in enumerate((S + 1, S + 2, S + 3)):
            j.rollout_sealed([RolloutRef(a, i, 0, dp.put(f"a{i}"))], policy_version=v)
        j.rollout_progress(RolloutRef(a, 3, 0, dp.put("a3p")), tokens=40, policy_version=S + 2)
        j.finished([b], policy_version=S + 1, locators=[dp.put("b")])
    return path, dp, a, b


def test_without_a_lag_nothing_newer_than_the_checkpoint_is_kept_and_each_refusal_is_named(newer_work):
    path, dp, a, b = newer_work
    state = restore(path, data_plane=dp, salvage=True)
    (ga,) = [g for g in state.admitted if g.group_id == a]
    assert not any(r.sealed or r.progress for r in ga.rollouts) and b in {g.group_id for g in state.admitted}
    assert sorted((x.group_id, x.index, x.kind, x.policy_version, x.bound) for x in state.beyond_lag) == [
        (a, 0, "rollout", S + 1, S), (a, 1, "rollout", S + 2, S), (a, 2, "rollout", S + 3, S),
        (a, 3, "prefix", S + 2, S), (b, None, "group", S + 1, S)]
    assert state.newer_weights == [(a, 0), (a, 1), (a, 2)] and state.newer_progress == [(a, 3)]
    assert state.kept_by_lead == {}


def test_within_the_lag_work_of_newer_weights_is_kept_and_says_how_it_was_made(newer_work):
    path, dp, a, b = newer_work
    state = restore(path, data_plane=dp, salvage=True, max_policy_lag=2)
    (ga,) = state.admitted
    (gb,) = state.replay
    assert gb.group_id == b and gb.locator == "b" and (gb.policy_span, gb.lead) == ((S + 1, S + 1), 1)
    r0, r1, r2, r3 = ga.rollouts
    assert (r0.sealed, r0.locator, r0.policy_span, r0.lead) == (True, "a0", (S + 1, S + 1), 1)
    assert (r1.sealed, r1.locator, r1.policy_span, r1.lead) == (True, "a1", (S + 2, S + 2), 2)
    assert not r2.sealed and r2.progress is None and r2.attempt == 1   # S+3 is beyond S+2: regenerated
    assert not r3.sealed and r3.progress.locator == "a3p" and (r3.policy_span, r3.lead) == ((S + 2, S + 2), 2)
    assert (ga.policy_span, ga.lead) == ((S + 1, S + 2), 2)
    (refused,) = state.beyond_lag
    assert (refused.group_id, refused.index, refused.policy_version, refused.bound) == (a, 2, S + 3, S + 2)
    assert f"policy version {S + 3}" in str(refused) and f"bound {S + 2}" in str(refused)
    assert {lead: (w.groups, w.rollouts, w.prefixes, w.tokens) for lead, w in state.kept_by_lead.items()} == {
        1: (1, 1, 0, 0), 2: (0, 1, 1, 40)}
    # the resume records what it kept: the journal hands the same work back
    with Journal.open(path, sync="none", resume=state) as j:
        assert j.group(a).rollouts.locators[:2] == ("a0", "a1")
        with pytest.raises(StaleAttempt):   # rollout 2's dead attempt is fenced
            j.rollout_sealed([RolloutRef(a, 2, 0, "late")], policy_version=S + 3)


def test_a_seal_or_prefix_without_a_policy_version_is_read_as_its_admissions(fast_tmp):
    """As the README's loop writes it: the version goes to admit, the seal passes none."""
    path, dp = str(fast_tmp / "j"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=S + 1, policy_version=S, rollouts=3)
        j.rollout_sealed([RolloutRef(g, 0, 0, dp.put("r0"))])                    # before the checkpoint
        j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        j.rollout_sealed([RolloutRef(g, 1, 0, dp.put("r1"))])                    # after it
        j.rollout_progress(RolloutRef(g, 2, 0, dp.put("p2")), tokens=9)
    state = restore(path, data_plane=dp, salvage=True)
    (back,) = state.admitted
    assert [(r.sealed, r.policy_version) for r in back.rollouts[:2]] == [(True, S), (True, S)]
    assert back.rollouts[2].progress.policy_version == S and state.salvaged_rollouts == [(g, 1)]


@pytest.mark.parametrize("lag, why", [(-1, "int >= 0"), (True, "int >= 0"), (1.5, "int >= 0"),
                                      (1, "salvage=True and data_plane=")])
def test_a_lag_that_cannot_hold_is_refused_before_anything_is_read(fast_tmp, lag, why):
    with pytest.raises(ValueError, match=why):
        restore(str(fast_tmp / "none"), max_policy_lag=lag)


def test_a_session_with_a_lag_needs_a_data_plane(fast_tmp):
    with pytest.raises(SessionError, match="max_policy_lag=2 keeps rows .* data_plane="):
        Session.open(str(fast_tmp / "j"), max_policy_lag=2)


def _noop() -> None:
    pass


DATASET = [{"idx": i} for i in range(8)]


def _collate(rows: list[dict]) -> dict:
    return {"idx": [r["idx"] for r in rows]}


def _open(root, lag: int) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchdata's, at import
        from torchdata.stateful_dataloader import StatefulDataLoader
    return Session.open(str(root / "j"), data_plane=LocalDataPlane(str(root / "rows")), max_policy_lag=lag,
                        dataset=DATASET, loader=StatefulDataLoader(DATASET, batch_size=2, collate_fn=_collate))


def _kept(s: Session) -> dict:
    """What the restore handed back: each group's row and its sealed rollouts (index, lead) and
    prefixes (index, tokens, lead), by row."""
    return {(g.idx, g.owner.name): ([(r.index, r.lead) for r in g.rollouts if r.sealed],
                                    [(r.index, r.progress.tokens, r.lead) for r in g.rollouts if r.progress])
            for g in s.restored.groups}


def test_a_session_keeps_newer_weights_work_across_two_crashes(fast_tmp):
    """Checkpoint 1, then (weights 2 generating, before any further checkpoint) a seal and a
    prefix of a group admitted before it, and a new take whose rollout is sealed: a crash. The
    restore with the lag keeps all three, lead 1; its first commit records them, so a second
    crash before the next checkpoint hands exactly the same work back; without the lag the
    next open regenerates them and names each."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)  # the first start's
        s = _open(fast_tmp, 1)
    batches = s.batches()
    g0, g1 = s.take(next(batches))
    s.admit([g0, g1], step=1, policy_version=0, rollouts=2)
    for i in range(2):
        s.seal(g0, i, 0, {"tokens": [i]})
    s.trained([g0], step=1)
    s.checkpoint(1, save=_noop)
    s.seal(g1, 0, 0, {"tokens": [10]}, policy_version=2)
    s.progress(g1, 1, 0, {"tokens": [11]}, tokens=5, policy_version=2)
    g2, g3 = s.take(next(batches))                    # adopted by the restore, under fresh ids
    s.admit([g2, g3], step=3, policy_version=2, rollouts=2)
    s.seal(g2, 0, 0, {"tokens": [20]})
    s.close()                                         # the crash (every commit above is durable)
    want = {(1, "ADMITTED"): ([(0, 1)], [(1, 5, 1)]), (2, "ADMITTED"): ([(0, 1)], []), (3, "ADMITTED"): ([], [])}
    for _ in range(2):                                # two crashes before the next checkpoint
        s = _open(fast_tmp, 1)
        assert s.step == 1 and _kept(s) == want
        assert sorted((w.idx, r.index, r.lead) for w in s.resume_work for r in w.rollouts if r.sealed) == \
            [(1, 0, 1), (2, 0, 1)]
        assert s.stats()["restored"]["kept_by_lead"] == {1: {"groups": 0, "rollouts": 2, "prefixes": 1, "tokens": 5}}
        s.close()
    s = _open(fast_tmp, 0)
    assert _kept(s) == {(1, "ADMITTED"): ([], []), (2, "ADMITTED"): ([], []), (3, "ADMITTED"): ([], [])}
    assert sorted((b.kind, b.policy_version, b.bound) for b in s.restored.beyond_lag) == [
        ("prefix", 2, 1), ("rollout", 2, 1), ("rollout", 2, 1)]
    restored = s.stats()["restored"]
    assert restored["beyond_lag"] == 3 and restored["dropped"] == {"beyond_lag": 3}
    assert restored["regenerate"] == 6 and restored["crash_lsn"] > restored["lsn"]
    s.close()


def test_a_session_without_any_policy_version_warns_once(fast_tmp):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = _open(fast_tmp, 0)
        (g, _) = s.take(next(s.batches()))
        s.admit([g], step=1, rollouts=3)
        for i in range(3):
            s.seal(g, i, 0, {"tokens": [i]})
        s.close()
    told = [w for w in seen if "policy_version" in str(w.message)]
    assert len(told) == 1 and issubclass(told[0].category, JournalWarning)
    assert f"group {g}" in str(told[0].message) and "admit()" in str(told[0].message)


def test_a_session_that_passes_the_version_to_admit_is_not_warned(fast_tmp):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = _open(fast_tmp, 0)
        (g, _) = s.take(next(s.batches()))
        s.admit([g], step=1, policy_version=0, rollouts=2)
        for i in range(2):
            s.seal(g, i, 0, {"tokens": [i]})
        s.close()
    assert not [w for w in seen if "policy_version" in str(w.message)]


def test_a_reissued_groups_work_on_the_dead_tail_is_kept_under_its_fresh_id(fast_tmp):
    """w waits at the checkpoint; the dead run admits it, seals rollout 0, records a prefix of
    rollout 1. The restore hands it back under a fresh id with that work (rollout 0 sealed
    again at attempt 0, rollout 1 continuing from its prefix); the dead run's late seal names
    the old id and is refused; a second crash before the next checkpoint hands it back again."""
    path, dp = str(fast_tmp / "j"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (w,) = j.taken([GroupRef(idx=7)], loader_state={"pos": 1})
        j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        j.admitted([w], target_step=S + 1, policy_version=S, rollouts=3)
        j.rollout_sealed([RolloutRef(w, 0, 0, dp.put("w0"))])
        j.rollout_progress(RolloutRef(w, 1, 0, dp.put("w1p")), tokens=30, policy_version=S)
    for crash in range(2):
        state = restore(path, data_plane=dp, salvage=True)
        (back,) = state.admitted
        assert state.reissued == [back] and back.idx == 7 and back.group_id != w
        assert [(r.attempt, r.sealed, r.locator) for r in back.rollouts] == [(0, True, "w0"), (0, False, None),
                                                                             (0, False, None)]
        assert back.rollouts[1].progress.locator == "w1p" and back.target_step == S + 1
        with Journal.open(path, sync="none", resume=state) as j:
            assert j.owner_of(w) == Owner.DROPPED and j.owner_of(back.group_id) == Owner.ADMITTED
            with pytest.raises(Exception, match=f"group {w}"):
                j.rollout_sealed([RolloutRef(w, 2, 0, "late")])


def test_work_continued_by_newer_weights_spans_every_version_that_made_it(fast_tmp):
    """Rollout 0 holds a prefix by weights S at the checkpoint; the dead run continues it by S+1
    and seals it by S+2. Rollout 1's prefixes after the checkpoint are by S+1, then S+2. With the
    lag 2, the seal comes back spanning (S, S+2) and the prefix (S+1, S+2), lead 2 each; the
    resume records the spans, so the state, a cut's tables and its state file keep them, and a
    restore from the cut alone hands the seal back with its span."""
    path, dp = str(fast_tmp / "j"), FakeDataPlane()
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)], loader_state={"pos": 1})
        j.admitted([g], target_step=S + 1, policy_version=S, rollouts=2)
        j.rollout_progress(RolloutRef(g, 0, 0, dp.put("p0")), tokens=10, policy_version=S)
        j.begin_checkpoint(step=S)
        j.commit_checkpoint(step=S)
        j.rollout_progress(RolloutRef(g, 0, 0, dp.put("p1")), tokens=20, policy_version=S + 1)
        j.rollout_sealed([RolloutRef(g, 0, 0, dp.put("r0"))], policy_version=S + 2)
        j.rollout_progress(RolloutRef(g, 1, 0, dp.put("q0")), tokens=5, policy_version=S + 1)
        j.rollout_progress(RolloutRef(g, 1, 0, dp.put("q1")), tokens=9, policy_version=S + 2)
        assert j.group(g).rollouts.since == (S, None) and j.group(g).rollouts.progress_of(1).since == S + 1
    state = restore(path, data_plane=dp, salvage=True, max_policy_lag=2)
    (back,) = state.admitted
    r0, r1 = back.rollouts
    assert (r0.sealed, r0.policy_span, r0.lead) == (True, (S, S + 2), 2)
    assert (r1.progress.locator, r1.policy_span, r1.lead) == ("q1", (S + 1, S + 2), 2)
    with Journal.open(path, sync="none", resume=state) as j:
        resumed = j.group(g).rollouts
        assert resumed.since == (S, None) and resumed.progress_of(1).since == S + 1
    cut = str(fast_tmp / "cut")
    compact(path, at="end", into=cut)
    for tables in (True, False):   # the .pt tables, and the journal's state file
        r = read_cut(cut, tables=tables).state.live[g].rollouts
        assert r.since == (S, None) and r.progress_of(1).since == S + 1
    assert restore(cut).admitted[0].rollouts[0].policy_span == (S, S + 2)
    assert verify(path).clean


def test_a_seal_may_say_which_older_weights_began_it(fast_tmp):
    """A rollout generated across a weight update without a prefix (slime, AReaL): the seal's
    two versions are its span, the newest its policy version whichever argument holds it."""
    with Journal.open(str(fast_tmp / "j"), sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.admitted([g], target_step=1, rollouts=3)
        j.rollout_sealed([RolloutRef(g, 0, 0, "a")], policy_version=7, since_version=5)
        j.rollout_sealed([RolloutRef(g, 1, 0, "b")], policy_version=7, since_version=9)
        j.rollout_sealed([RolloutRef(g, 2, 0, "c")], policy_version=7, since_version=7)
        r = j.group(g).rollouts
        assert (r.versions, r.since) == ((7, 9, 7), (5, 7, None))


def test_a_prefix_continued_by_older_weights_keeps_the_newer_version(fast_tmp):
    """After a restore to S, weights S continue a prefix that weights S+2 made: the prefix, and
    the seal that completes it, still hold tokens of S+2 (the bound is on the newest)."""
    with Journal.open(str(fast_tmp / "j"), sync="none") as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.admitted([g], target_step=1, rollouts=1)
        j.rollout_progress(RolloutRef(g, 0, 0, "p1"), tokens=4, policy_version=S + 2)
        j.rollout_progress(RolloutRef(g, 0, 0, "p2"), tokens=8, policy_version=S)
        assert j.group(g).rollouts.progress_of(0) == Progress("p2", 8, None, S + 2, S)
        j.rollout_sealed([RolloutRef(g, 0, 0, "r")], policy_version=S)
        r = j.group(g).rollouts
        assert (r.versions, r.since) == ((S + 2,), (S,))
