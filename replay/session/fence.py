"""The attempt fence, checked before a rollout's rows are written: a session asks it before it
puts a prefix in the data plane, so a refused call writes nothing anywhere."""

from __future__ import annotations

from journal import Commit, Journal, Owner, RolloutProgress, RolloutRef
from journal.fold import fold


def refuse_progress(journal: Journal, group_id: int, index: int, attempt: int, tokens: int,
                    turn: int | None, policy_version: int | None) -> None:
    """The journal's own error when the rollout's fence refuses this progress as of the last
    commit (an attempt given up: `StaleAttempt`; a sealed rollout: `RolloutEnded`; ...), found
    by folding the event onto a copy of the state. The row of an attempt given up may not even
    be storable: a restarted process numbers its parts from 1 again, as the prefix a restore
    pins did. A call the fence lets through here may still be refused by its commit (another
    thread's commit came first): the session then deletes its row."""
    g = journal.group(group_id)
    r = g.rollouts if g is not None and g.owner == Owner.ADMITTED else None
    if r is not None and index < r.n and not r.is_sealed(index) and r.attempts[index] == attempt:
        return
    state = journal.state_copy()
    event = RolloutProgress(RolloutRef(group_id, index, attempt, "refused"), tokens, turn, policy_version)
    fold([Commit(state.lsn + 1, [event])], state)   # raises what the commit would
