"""`Draft`: a commit recorded with no journal, for a writer to make later (a resume's first
commit). Its calls are the transaction's: they record the same events, return the same
values, and refuse the same arguments with the same errors, at the call; the ownership rules
apply when a writer commits it. It never writes anything."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from journal import (GroupRef, Journal, KeptAtLead, OwnershipError, Reader, ResumePlan, Restored, RolloutRef,
                     State)
from journal.transaction import Draft
from tests.support.journal_model import tree_bytes


def _calls(o) -> list:
    """Every call once, in an order the ownership rules accept from the empty state; what each
    returned."""
    out = [o.taken([GroupRef(0, "math", 0, b"f" * 16), GroupRef(1), GroupRef(2, group_id=7)],
                   loader_state={"pos": 3, "big": b"x" * 70_000}, dataset_size=10)]
    out.append(o.diverted([7]))
    out.append(o.admitted([0], target_step=1, policy_version=0, rollouts=2))
    out.append(o.admitted([1], target_step=1))
    out.append(o.rollout_progress(RolloutRef(0, 0, 0, "p"), tokens=5, turn=1, policy_version=0))
    out.append(o.rollout_sealed([RolloutRef(0, 0, 0, "s0")], policy_version=0, since_version=None))
    out.append(o.rollout_failed([RolloutRef(0, 1, 0)], reason="timeout"))
    out.append(o.rollout_sealed([RolloutRef(0, 1, 1, "s1")], policy_version=1))
    out.append(o.finished([0]))
    out.append(o.finished([1], locators=["g1"]))
    out.append(o.trained([0, 1], step=1))
    out.append(o.discarded([7], reason="spare unused"))
    out.append(o.begin_checkpoint(step=1))
    out.append(o.commit_checkpoint(step=1))
    out.append(o.record_identity({"temperature": 0.7}))
    out.append(o.record_restore(Restored(0, None, 0, 1.5, 0, [KeptAtLead(0, 1, 2, 3, 4)])))
    return out


def test_a_draft_records_what_a_transaction_does(fast_tmp):
    path = str(fast_tmp / "j")
    draft = Draft(State(), path)
    drafted = _calls(draft)
    assert tree_bytes(str(fast_tmp)) == {}  # nothing written anywhere
    with Journal.open(path) as j:
        with j.transaction() as tx:
            done = _calls(tx)
    assert drafted == done == [[0, 1, 7]] + [None] * 15
    (rec,) = Reader(path).records()
    assert rec.commit.events == draft.events
    assert {d: rec.blobs[d] for d in draft.blobs} == draft.blobs and draft.blobs


def test_a_writer_commits_a_draft_as_its_first_commit(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.admitted([g], target_step=1, rollouts=1)
        state = j.state_copy()
    draft = Draft(state, path)
    draft.rollout_failed([RolloutRef(g, 0, 0)], reason="abandoned_on_restore")
    (new,) = draft.taken([GroupRef(idx=1)])
    assert new == state.next_group_id
    with Journal.open(path, resume=ResumePlan(fold_state=state, first_commit=draft.events)) as j:
        assert j.lsn == state.lsn + 1 and j.group(g).rollouts.attempts == (1,) and j.group(new) is not None


# bad arguments: how a call is made with each, and the message it raises
BAD = {
    "no group": (lambda o: o.admitted([], target_step=1), ValueError, r"admitted\(\) argument group_ids must name"),
    "seal without locator": (lambda o: o.rollout_sealed([RolloutRef(0, 0, 0)]), ValueError,
                             r"rollout_sealed\(\) needs the locator"),
    "progress without locator": (lambda o: o.rollout_progress(RolloutRef(0, 0, 0), tokens=1), ValueError,
                                 r"rollout_progress\(\) needs the locator"),
    "negative step": (lambda o: o.commit_checkpoint(step=-1), ValueError, r"step must be an integer >= 0"),
    "not a GroupRef": (lambda o: o.taken([3]), TypeError, r"taken\(\) expects GroupRef items"),
    "id below the next": (lambda o: o.taken([GroupRef(5, group_id=0)]), OwnershipError,
                          r"taken allocates group 0, but ids below 1 are already used"),
    "not a Restored": (lambda o: o.record_restore({}), TypeError, r"record_restore\(\) takes a journal.Restored"),
    "identity key": (lambda o: o.record_identity({1: 2}), TypeError, r"identity keys must be str"),
    "begin at a committed step": (lambda o: o.begin_checkpoint(step=4), OwnershipError,
                                  r"begin_checkpoint\(step=4\) is below step 5, which is committed"),
}


def _at_step_5(path: str) -> State:
    """The state of a journal at `path` that took group 0 and committed the step-5 checkpoint."""
    with Journal.open(path) as j:
        j.taken([GroupRef(idx=0)])
        j.begin_checkpoint(step=5)
        j.commit_checkpoint(step=5)
        return j.state_copy()


@settings(max_examples=40, deadline=None)
@given(bad=st.lists(st.sampled_from(sorted(BAD)), min_size=1, max_size=3))
def test_a_draft_refuses_what_a_transaction_refuses(fast_tmp_module, bad):
    path = str(fast_tmp_module / f"j{len(list(fast_tmp_module.iterdir()))}")
    draft = Draft(_at_step_5(path), path)
    with Journal.open(path) as j:
        for name in bad:
            call, cls, words = BAD[name]
            errors = []
            for recorder in (draft, None):
                with pytest.raises(cls) as info:
                    if recorder is None:
                        with j.transaction() as tx:
                            call(tx)
                    else:
                        call(recorder)
                errors.append(str(info.value))
            assert re.search(words, errors[0]), errors[0]
            # the same message, but where: a draft names the journal it is for
            assert errors[0].replace(f"a draft for journal {path}", f"journal {path}") == errors[1]
        assert draft.events == [] and j.lsn == 3
