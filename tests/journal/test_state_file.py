"""The journal state file (`journal/state_file.py`, docs/format.md "State files"): format 2
(the live groups as column blocks, their rollouts flattened, their prefixes too) round-trips any state however
its live groups are split into blocks, the format-1 file of tests/fixtures (one msgpack map
per group) still reads as the state it holds, a cut's state file (written from the columns of
its group tables) is the fold at the cut, and a file whose columns disagree is refused."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import Group, Owner, Progress, Reader, Rollouts, StateFileCorrupt, state_file
from journal.layout import STATE_FILE
from snapshot import compact
from tests.fixtures.make_state_file_v1 import RUN_ID, sample_state
from tests.support.rollout_journals import RolloutTrainer
from tests.support.snapshot_support import assert_same_state

FIXTURE_V1 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "state_file_v1.bin")
LIVE = (Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE)


def test_a_format_1_file_still_reads_as_the_state_it_holds():
    with open(FIXTURE_V1, "rb") as f:
        assert f.read(8) == b"OWNJST01"
    state, run_id = state_file.read(FIXTURE_V1)
    assert run_id == RUN_ID
    assert_same_state(state, sample_state(), "format-1 fixture")
    assert state.live[5].rollouts == sample_state().live[5].rollouts


def test_format_2_round_trips_the_sample_state():
    data = state_file.encode(sample_state(), RUN_ID)
    assert data[:8] == state_file.MAGIC == b"OWNJST02"
    state, run_id = state_file.decode(data, "sample")
    assert run_id == RUN_ID
    assert_same_state(state, sample_state(), "format 2")


def _rollouts(draw, n: int) -> Rollouts:
    attempts = tuple(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    sealed = draw(st.integers(0, (1 << n) - 1))
    locators = tuple(f"dp/{i}/{attempts[i]}" if sealed >> i & 1 else None for i in range(n))
    versions = tuple(draw(st.integers(0, 9)) if sealed >> i & 1 else None for i in range(n))
    prefixes = tuple(None if sealed >> i & 1 or not draw(st.booleans()) else
                     _prefix(draw, f"dp/{i}/{attempts[i]}/p") for i in range(n))
    # a sealed rollout that older weights began: the oldest version of its tokens
    since = tuple(draw(st.none() | st.integers(0, versions[i] - 1)) if sealed >> i & 1 and versions[i] else None
                  for i in range(n))
    return Rollouts(attempts, sealed, locators, versions,
                    prefixes if any(p is not None for p in prefixes) else None,
                    since if any(v is not None for v in since) else None)


def _prefix(draw, locator: str) -> Progress:
    version = draw(st.none() | st.integers(0, 9))
    since = draw(st.none() | st.integers(0, version - 1)) if version else None
    return Progress(locator, draw(st.integers(0, 1 << 40)), draw(st.none() | st.integers(0, 99)), version, since)


@st.composite
def live_sets(draw) -> list[Group]:
    gids = draw(st.lists(st.integers(0, 1 << 40), unique=True, max_size=30))
    opt_int = st.none() | st.integers(-(1 << 62), 1 << 62)
    text = st.none() | st.text(max_size=6)
    out = []
    for gid in gids:
        n = draw(st.sampled_from([None, 1, 3, 8]))
        out.append(Group(gid, draw(st.integers(0, 1 << 50)), draw(text), draw(opt_int),
                         draw(st.none() | st.binary(max_size=16)), draw(st.sampled_from(LIVE)),
                         draw(opt_int), draw(opt_int), draw(text), draw(opt_int),
                         _rollouts(draw, n) if n else None))
    return out


@settings(max_examples=60, deadline=None)
@given(live_sets(), st.data())
def test_format_2_round_trips_any_live_set_split_into_blocks(groups, data):
    state = sample_state()
    state.live = {g.group_id: g for g in groups}
    cuts = sorted(data.draw(st.lists(st.integers(0, len(groups)), max_size=3)))
    blocks = [groups[a:b] for a, b in zip([0] + cuts, cuts + [len(groups)])]
    encoded = state_file.encode(state, RUN_ID, [state_file.group_columns(b) for b in blocks])
    got, _ = state_file.decode(encoded, "blocks")
    assert_same_state(got, state, f"{len(blocks)} blocks")
    assert_same_state(state_file.decode(state_file.encode(state, RUN_ID), "one block")[0], state)


def test_a_cut_of_groups_with_rollouts_holds_the_fold_in_its_state_file(fast_tmp):
    path = str(fast_tmp / "j")
    trainer = RolloutTrainer(path, rows=40, batch=4, rollouts=3)
    trainer.run(5)
    cut = compact(path, "end", journal=trainer.j, retention=None).cut_path
    trainer.j.close()
    state, run_id = state_file.read(os.path.join(cut, STATE_FILE))
    reader = Reader(path)
    assert run_id == reader.run_id
    want = reader.fold()
    assert any(g.rollouts is not None for g in want.live.values())
    assert_same_state(state, want, "cut with rollouts")


def _columns(state):
    return state_file.group_columns(list(state.live.values()))


def _truncated(name):
    def change(columns):
        columns[name] = columns[name][:-1]
    return change


def _owner(code):
    def change(columns):
        columns["owner"] = [code] + columns["owner"][1:]
    return change


def _negative_n(columns):
    columns["rollout_n"] = [-n if n else n for n in columns["rollout_n"]]


def _duplicate(columns):
    columns["group_id"] = [columns["group_id"][0]] * len(columns["group_id"])


BAD_COLUMNS = {  # kind: (change, what the error says)
    "a group column short": (_truncated("epoch"), "columns of lengths"),
    "the group ids short": (_truncated("group_id"), "columns of lengths"),
    "the owners short": (_truncated("owner"), "columns of lengths"),
    "a rollout column short": (_truncated("rollout_locator"), "rollout columns do not hold"),
    "the sealed bits short": (_truncated("rollout_sealed"), "rollout columns do not hold"),
    "a negative rollout count": (_negative_n, "rollout columns do not hold"),
    "a trained owner": (_owner(Owner.TRAINED), "not a live owner"),
    "owner code 0": (_owner(0), "not a live owner"),
    "a group id twice": (_duplicate, "4 of their ids twice")}


@pytest.mark.parametrize("kind", list(BAD_COLUMNS))
def test_columns_that_disagree_are_refused(kind):
    change, says = BAD_COLUMNS[kind]
    columns = _columns(sample_state())
    change(columns)
    data = state_file.encode(sample_state(), RUN_ID, [columns])  # a checksummed, well-formed file
    with pytest.raises(StateFileCorrupt, match=f"^where: .*{says}"):
        state_file.decode(data, "where")
