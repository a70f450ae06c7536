"""The table of kinds (`journal/kinds.py`) is complete and says what the fold does.

Every record has its row, and every call its method on each recorder; a reader naming a kind
that does not exist fails when it is built. The projections the readers walk instead of
testing types (the groups an event names, the rows it takes, the rollouts it names, the
attempt it shows dispatched, the owner its groups enter) are held against the fold itself:
random events are folded, and what each accepted one changed is what its kind's projections
say. `rollout_progress` names its one rollout as the seal and the failure name theirs, and
is stored as it always was."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from journal import (AsyncJournal, Admitted, CheckpointBegun, CheckpointCommitted, Commit, Discarded, Diverted,
                     Finished, Journal, Owner, OwnershipError, RolloutFailed, RolloutProgress, RolloutRef,
                     RolloutSealed, State, TakenGroup, Taken, Trained, Transaction)
from journal.events import EVENT_TYPES, commit_decoder, commit_encoder
from journal.fold import apply
from journal.kinds import BY_NAME, KIND_OF, KINDS, event_name, handlers
from journal.transaction import Draft


def test_every_record_has_its_row_and_every_call_its_methods():
    assert tuple(k.struct for k in KINDS) == EVENT_TYPES
    assert set(KIND_OF) == set(EVENT_TYPES)
    for kind in KINDS:
        assert callable(kind.fold(kind, State()))  # its fold step on a state
        assert kind.name == kind.struct.__struct_config__.tag
        for recorder in (Journal, Transaction, Draft, AsyncJournal):
            assert callable(getattr(recorder, kind.call)), (recorder, kind.call)


def test_a_reader_names_the_kinds_it_reads():
    seen = []
    table = handlers({"trained": seen.append, "discarded": seen.append})
    assert set(table) == {Trained, Discarded}
    ev = Trained([1], step=2)
    table[type(ev)](ev)
    assert seen == [ev] and table.get(Admitted) is None and event_name(ev) == "trained"
    with pytest.raises(KeyError, match="no event kind named trainde"):
        handlers({"trainde": seen.append})


def test_a_kind_without_a_row_of_its_own_shows_its_fields():
    kind = BY_NAME["trained"]
    assert kind.row(Trained([1, 2], step=7)) == {"step": 7}
    assert kind.text(Trained([1, 2], step=7), None) == "step=7"
    failed = RolloutFailed([RolloutRef(3, 1, 0)], reason="timeout")
    assert BY_NAME["rollout_failed"].row(failed) == {
        "rollouts": [{"group_id": 3, "index": 1, "attempt": 0, "locator": None}], "reason": "timeout"}


def test_a_progress_names_its_rollout_as_a_seal_does_and_is_stored_as_before():
    ref = RolloutRef(4, 2, 1, "dp/p")
    ev = RolloutProgress(ref, 96, 3, 7, 5)
    assert ev.rollouts == (ref,) and BY_NAME["rollout_progress"].rollouts(ev) == (ref,)
    # the layout docs/format.md gives, which every journal written so far holds
    older = msgspec.msgpack.encode([1, [["rollout_progress", [4, 2, 1, "dp/p"], 96, 3, 7, 5]], []])
    assert commit_encoder.encode(Commit(1, [ev])) == older
    assert commit_decoder.decode(older).events == [ev]


# -- the projections against the fold ----------------------------------------------------------

GROUPS = 4  # taken first, one commit; the events then name these and one never taken


def _event(data, state: State) -> object:
    """A random event over the first GROUPS groups (and group 9, never taken): the groups it
    moves mostly ones its kind may move (in its from-owners), its rollouts mostly those of
    groups tracking rollouts, named with their current attempt (so that most are legal, and
    every kind's are some of the time)."""
    gid = st.sampled_from(list(range(GROUPS)) + [9])

    def moves(struct: type, *fields) -> list:
        """An event of `struct` and its other `fields`; thrice when some groups may move."""
        allowed = KIND_OF[struct].from_owners
        fit = sorted(g for g, group in state.live.items() if group.owner in allowed)
        named = st.one_of(st.sampled_from(fit), st.sampled_from(fit), gid) if fit else gid
        event = st.builds(struct, st.lists(named, min_size=1, max_size=2), *fields)
        return [event] * 3 if fit else [event]
    tracked = sorted(g for g, group in state.live.items() if group.rollouts is not None)

    def current(g: int, i: int) -> int:
        r = state.live[g].rollouts if g in tracked else None
        return r.attempts[i] if r is not None and i < r.n else 0
    ref = st.builds(lambda g, i, late: RolloutRef(g, i, max(current(g, i) - late, 0), "dp/x"),
                    st.sampled_from(tracked + [9]) if tracked else gid, st.integers(0, 1),
                    st.sampled_from([0, 0, 0, 1]))
    rollout_events = [st.builds(RolloutSealed, st.lists(ref, min_size=1, max_size=2)),
                      st.builds(RolloutFailed, st.lists(ref, min_size=1, max_size=2), st.just("r")),
                      st.builds(RolloutProgress, ref, st.integers(0, 9))]
    return data.draw(st.one_of(
        *moves(Diverted), *moves(Admitted, st.just(1), st.none(), st.none(), st.sampled_from([None, 2])),
        *moves(Finished), *moves(Trained, st.just(1)), *moves(Discarded, st.just("r")),
        *rollout_events, *rollout_events,
        st.builds(CheckpointBegun, st.integers(0, 2)),
        st.builds(CheckpointCommitted, st.integers(0, 2)),
    ), label="event")


def _changed(before: State, after: State) -> set[int]:
    """The groups whose record the fold replaced (it shares the ones it leaves) or whose owner
    differs between the two states."""
    ids = set(before.live) | set(after.live)
    return {g for g in ids if before.live.get(g) is not after.live.get(g) or before.owner_of(g) != after.owner_of(g)}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_projections_say_what_the_fold_does(data):
    state = State()
    taken = Taken([TakenGroup(g, g) for g in range(GROUPS)])
    apply(state, Commit(1, [taken]))
    assert [g.group_id for g in KIND_OF[Taken].takes(taken)] == sorted(state.live)
    for _ in range(data.draw(st.integers(1, 25), label="events")):
        ev = _event(data, state)
        kind = KIND_OF[type(ev)]
        before = state.copy()
        try:
            apply(state, Commit(state.lsn + 1, [ev]))
        except OwnershipError:
            continue
        named = set(kind.groups(ev))
        assert _changed(before, state) == named, ev
        assert {r.group_id for r in kind.rollouts(ev)} <= named
        for g in named:  # where the event leaves its groups is its declared to-owner
            assert state.owner_of(g) == kind.to, ev
            assert (kind.moves_into is not None) == (before.owner_of(g) != kind.to)
        for ref in kind.rollouts(ev):  # the attempt it shows dispatched is the rollout's now
            assert state.live[ref.group_id].rollouts.attempts[ref.index] == kind.dispatched(ref), ev
        if not named:
            assert kind.takes(ev) == () and kind.rollouts(ev) == ()
