"""The fold's steps agree with the ownership table written once as data.

`journal.kinds.TRANSITIONS` is the table, read from each kind's declaration; `fold_records`
folds each event with its kind's step, made from the same declaration. Here random commits
over a few groups are folded, and every outcome (accepted or `OwnershipError`, each group's
owner afterwards, the per-owner counts) is compared with a reference interpreter that reads
nothing but the table."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given, settings, strategies as st

from journal import (Admitted, Commit, Discarded, Diverted, Finished, Owner, OwnershipError, State,
                     TakenGroup, Taken, Trained)
from journal import fold
from journal.fold import apply
from journal.kinds import KIND_OF, TRANSITIONS, Kind, transition_table_markdown

_MOVES = {"diverted": Diverted, "admitted": Admitted, "finished": Finished, "trained": Trained,
          "discarded": Discarded}


def _event(kind: str, gids: list[int]):
    if kind == "taken":
        return Taken([TakenGroup(g, g) for g in gids])
    if kind == "admitted":
        return Admitted(gids, target_step=1)
    if kind == "trained":
        return Trained(gids, step=1)
    if kind == "discarded":
        return Discarded(gids, reason="r")
    return _MOVES[kind](gids)


def _reference(owners: dict[int, Owner], events: list[tuple[str, list[int]]]) -> dict | None:
    """Owners after the commit by the table alone, or None if the table forbids it."""
    after = dict(owners)
    for kind, gids in events:
        t = TRANSITIONS[kind]
        if len(set(gids)) != len(gids):
            return None
        for g in gids:
            current = after.get(g)
            if kind == "taken":
                if current is not None:
                    return None
            elif current not in t.from_owners:
                return None
            after[g] = t.to
    return after


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_fold_outcome_is_the_tables(data):
    state, owners = State(), {}
    for _ in range(data.draw(st.integers(1, 30), label="commits")):
        events = []
        for _ in range(data.draw(st.integers(1, 3), label="events")):
            kind = data.draw(st.sampled_from(sorted(TRANSITIONS.keys() & (_MOVES.keys() | {"taken"}))))
            if kind == "taken":  # fresh ascending ids (legal), or an id already used (not)
                fresh = data.draw(st.booleans())
                start = state.next_group_id + len([e for e in events if e[0] == "taken"]) * 3
                gids = list(range(start, start + data.draw(st.integers(1, 2)))) if fresh or not owners \
                    else [data.draw(st.sampled_from(sorted(owners)))]
            else:  # mostly groups that exist, sometimes one never taken
                pool = sorted(owners) + [999]
                gids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            events.append((kind, gids))
        expected = _reference(owners, events)
        if expected is not None:  # taken within one commit must also ascend past each other
            taken_ids = [g for k, gids in events if k == "taken" for g in gids]
            if taken_ids != sorted(set(taken_ids)) or (taken_ids and taken_ids[0] < state.next_group_id):
                expected = None
        commit = Commit(state.lsn + 1, [_event(k, g) for k, g in events])
        before = (state.lsn, dict(state.live), list(state.counts))
        try:
            apply(state, commit)
        except OwnershipError:
            assert expected is None, f"the fold refused what the table allows: {events}"
            assert (state.lsn, dict(state.live), list(state.counts)) == before
            continue
        assert expected is not None, f"the fold accepted what the table forbids: {events}"
        owners = expected
        assert {g: state.owner_of(g) for g in owners} == owners
        counted = [0] * 7
        for o in owners.values():
            counted[o] += 1
        assert state.counts == counted


def test_every_event_kind_has_a_row():
    from journal.events import EVENT_TYPES
    assert tuple(TRANSITIONS) == tuple(t.__struct_config__.tag for t in EVENT_TYPES)


def test_the_readme_shows_the_table():
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert transition_table_markdown() in readme


def _fold_reading(monkeypatch, rows: dict) -> dict:
    """The fold's dispatch made from the declarations of `rows` (event class -> from-owners)
    widened, each kind's step built by its own factory from the widened declaration, and put
    in the fold's place; the widened kinds."""
    widened = {struct: Kind(struct, KIND_OF[struct].record, from_owners=owners, to=KIND_OF[struct].to,
                            fold=KIND_OF[struct].fold, groups=KIND_OF[struct].groups)
               for struct, owners in rows.items()}
    monkeypatch.setattr(fold, "KIND_OF", {**KIND_OF, **widened})
    return widened


_WIDENED = {Diverted: {Owner.RESERVED, Owner.ADMITTED}, Admitted: {Owner.RESERVED, Owner.SPARE, Owner.REPLAY},
            Finished: {Owner.ADMITTED, Owner.RESERVED, Owner.SPARE}, Trained: {Owner.REPLAY, Owner.ADMITTED},
            Discarded: {Owner.RESERVED, Owner.SPARE}}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_widened_table_keeps_the_counts(data):
    """The fold reads each move's from- and to-owners from the declarations: with every row
    widened, every accepted commit still leaves each owner's count equal to its groups (a
    count taken from one hard-coded from-owner would drift)."""
    with pytest.MonkeyPatch.context() as mp:
        widened = _fold_reading(mp, _WIDENED)
        assert widened[Finished].from_owners == _WIDENED[Finished]
        state = State()
        for _ in range(data.draw(st.integers(1, 25), label="commits")):
            kind = data.draw(st.sampled_from(["taken", *sorted(_MOVES)]), label="kind")
            if kind == "taken":
                gids = [state.next_group_id]
            else:
                gids = [data.draw(st.sampled_from(sorted(state.live) or [0]), label="group")]
            try:
                apply(state, Commit(state.lsn + 1, [_event(kind, gids)]))
            except OwnershipError:
                continue
            counted = [0] * 7
            for g in state.live.values():
                counted[g.owner] += 1
            for code in list(state.terminal.codes) + list(state.terminal.sparse.values()):
                counted[code] += code != 0
            counted[0] = 0
            assert state.counts == counted, (kind, gids)
