"""`journal.history`: the shape of a history (lineage and limits, the timeline holding an LSN,
dead tails), the checkpoint markers under the fold's own rule, and the choice of restore point.
"""

from __future__ import annotations

import pytest

from journal import CheckpointBegun, CheckpointCommitted, Commit, OwnershipError, Record, State, history
from journal.reader import Timeline
from journal.fold import apply
from journal.history import NoSuchPoint, restore_point


def timelines(*specs) -> dict:
    """{timeline: Timeline} from (timeline, parent, branch_lsn) triples."""
    return {t: Timeline(t, parent, branch) for t, parent, branch in specs}


# 1 -- 2 (branches off 1 at LSN 10) -- 4 (off 2 at 20); 3 branches off 1 at 15, dead
TREE = timelines((1, 0, 0), (2, 1, 10), (3, 1, 15), (4, 2, 20))


def test_the_active_history_is_the_newest_timeline_and_its_ancestors_up_to_each_branch_point():
    assert [(s.timeline.timeline, s.limit) for s in history.spans(TREE)] == [(1, 10), (2, 20), (4, None)]
    assert [(s.timeline.timeline, s.limit) for s in history.spans(TREE, 3)] == [(1, 15), (3, None)]
    assert history.spans({}) == [] and history.lineage({}) == []


def test_an_ancestor_with_no_segments_on_disk_ends_the_lineage():
    """Its segments were set aside or retired: the history on disk starts in its child."""
    assert [tl.timeline for tl in history.lineage(timelines((2, 1, 10), (4, 2, 20)))] == [2, 4]
    assert [(s.timeline.timeline, s.limit) for s in history.spans(timelines((4, 2, 20)))] == [(4, None)]


def test_the_timeline_holding_an_lsn_is_found_from_the_tip():
    assert [history.holder(TREE, 4, lsn) for lsn in (1, 10, 11, 20, 21, 99)] == [1, 1, 2, 2, 4, 4]
    assert history.holder(TREE, 3, 16) == 3 and history.holder(TREE, 3, 15) == 1
    assert history.holder(timelines((5, 0, 100)), 5, 100) is None  # below the root (retired)


def test_dead_tails_say_where_they_leave_the_active_history():
    got = [(b.timeline, b.branch_lsn, b.divergence, b.child) for b in history.dead_branches(TREE)]
    # timeline 1 after LSN 10 (2 continues it), 2 after 20 (4 continues it), all of 3 (it left
    # timeline 1 at 15, which the active history left at 10)
    assert got == [(1, 10, 10, 2), (2, 20, 20, 4), (3, 15, 10, None)]


def test_a_branch_at_or_after_an_lsn_continues_the_history_through_it():
    assert history.continued_by(TREE, 1, 10).timeline == 2
    assert history.continued_by(TREE, 1, 16) is None
    assert history.continued_by(TREE, 1, None) is None


def records(*events_per_commit):
    return [Record(Commit(lsn, list(evs)), 0, 1, "seg", 0, {}) for lsn, evs in enumerate(events_per_commit, 1)]


def test_checkpoint_markers_follow_the_folds_rule():
    ok = records([CheckpointBegun(1)], [], [CheckpointCommitted(1)], [CheckpointBegun(2)])
    assert history.checkpoint_markers(ok) == (4, {1: 1})
    # a commit marker without a pending begin is refused, as the fold refuses it
    bad = records([CheckpointBegun(1)], [CheckpointCommitted(1)], [CheckpointCommitted(7)], [CheckpointBegun(2)],
                  [CheckpointCommitted(2)])
    with pytest.raises(OwnershipError, match=r"LSN 3: checkpoint_committed\(step=7\) without a pending"):
        history.checkpoint_markers(bad)
    folded = State()
    with pytest.raises(OwnershipError, match=r"LSN 3: checkpoint_committed\(step=7\) without a pending"):
        for r in bad:
            apply(folded, r.commit)
    # tolerant (a salvage read) skips the commit the fold would refuse, as a tolerant fold does
    assert history.checkpoint_markers(bad, tolerant=True) == (5, {1: 1, 2: 4})
    again = records([CheckpointBegun(1)], [CheckpointCommitted(1)], [CheckpointBegun(1)])
    with pytest.raises(OwnershipError, match="already committed"):
        history.checkpoint_markers(again)


def test_checkpoint_markers_continue_a_state():
    s = State()
    s.lsn, s.pending_checkpoints, s.committed_checkpoints = 2, {3: 2}, {1: 1}
    rec = Record(Commit(3, [CheckpointCommitted(3)]), 0, 1, "seg", 0, {})
    assert history.checkpoint_markers([rec], s) == (3, {1: 1, 3: 2})
    assert history.checkpoint_markers([], s) == (2, {1: 1})


def test_the_restore_point():
    committed = {2: 5, 4: 9}
    assert restore_point("latest-checkpoint", None, 12, committed) == (9, 4)
    assert restore_point("latest-checkpoint", None, 12, {}) == (0, None)
    assert restore_point("end", None, 12, committed) == (12, None)
    assert restore_point(5, None, 12, committed) == (5, 2)   # an LSN that is a checkpoint names it
    assert restore_point(6, None, 12, committed) == (6, None)
    assert restore_point("latest-checkpoint", 2, 12, committed) == (5, 2)
    with pytest.raises(NoSuchPoint, match=r"no committed checkpoint for step 3 .*committed steps: \[2, 4\]"):
        restore_point("latest-checkpoint", 3, 12, committed)
    with pytest.raises(NoSuchPoint, match=r"LSN 13 is outside the active history \(0..12\)"):
        restore_point(13, None, 12, committed)
