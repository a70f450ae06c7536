"""The example trainer's token-by-token generation: a rollout continued from its durable prefix
(through the data plane's codec) generates the tokens the uninterrupted one would have, after
exactly that prefix; a multi-turn one continues at the turn it reached, with the environment
state it had."""

from __future__ import annotations

import statistics

import torch
from hypothesis import given, settings, strategies as st

from replay import LocalDataPlane

from examples.dataset import PromptDataset
from examples.environments import KINDS, Maze, Notebook, environment_for
from examples.generation import (LENGTH_MEDIAN, MAX_TOKENS, TURN_TOKENS, Rollout, rollout_key,
                                 rollout_length)
from examples.trainer import TinyPolicy

torch.manual_seed(0)
POLICY = TinyPolicy().eval()
DS = PromptDataset(64, seed=0)
VERSION = 3


def _start(idx: int, index: int, length: int) -> Rollout:
    return Rollout.start(POLICY, torch.tensor(DS[idx]["tokens"]), idx, rollout_key(0, 0, idx, index), length,
                         environment_for(idx), version=VERSION)


def _resumed(idx: int, index: int, length: int, row: dict) -> Rollout:
    return Rollout.resumed(POLICY, torch.tensor(DS[idx]["tokens"]), idx, rollout_key(0, 0, idx, index), length,
                           environment_for(idx), row, version=VERSION)


@settings(max_examples=40, deadline=None)
@given(idx=st.integers(0, 63), index=st.integers(0, 7), length=st.integers(1, 60), data=st.data())
def test_a_continued_rollout_is_its_prefix_then_the_tokens_the_uninterrupted_one_makes(
        idx, index, length, data, tmp_path_factory):
    whole = _start(idx, index, length)
    whole.advance(length)
    cut = data.draw(st.integers(0, length))
    part = _start(idx, index, length)
    part.advance(cut)
    part.us = 1234 * cut
    dp = LocalDataPlane(str(tmp_path_factory.mktemp("rows")))
    row = dp.get(dp.put_rollout(7, index, 0, part.progress_row()))
    prefix = row["trace"].tolist()
    cont = _resumed(idx, index, length, row)
    assert (cont.generated, cont.us, cont.turn) == (cut, 1234 * cut, part.turn)
    cont.advance(length)
    assert cont.trace[:len(prefix)] == prefix
    assert cont.trace == whole.trace and cont.done


def test_a_multi_turn_rollout_resumes_at_its_turn_with_its_environment_state(tmp_path):
    dp = LocalDataPlane(str(tmp_path))
    for idx in range(len(KINDS)):
        env_cls = KINDS[idx]
        if env_cls is None:
            continue
        r = _start(idx, 0, 5 * TURN_TOKENS + 2)
        r.advance(3 * TURN_TOKENS)
        assert r.turn == 3 and r.stops(16)
        row = dp.get(dp.put_rollout(idx, 0, 0, r.progress_row()))
        cont = _resumed(idx, 0, 5 * TURN_TOKENS + 2, row)
        assert cont.turn == 3 and cont.actions == r.actions
        assert type(cont.env) is env_cls
        if env_cls is Notebook:
            assert cont.env.total == r.env.total and torch.equal(cont.env.notes, r.env.notes)
            assert int(cont.env.notes.sum()) == 3
        elif env_cls is Maze:
            assert cont.env.pos == r.env.pos
        # the next turn's observation is the one the uninterrupted rollout gets
        r.advance(TURN_TOKENS)
        cont.advance(TURN_TOKENS)
        assert cont.trace == r.trace and cont.turn == 4


def test_progress_points_fall_every_k_tokens_or_at_every_turn():
    single = _start(0, 0, 40)      # idx 0: single-turn
    multi = _start(5, 0, 40)
    assert environment_for(0) is None and environment_for(5) is not None
    stops = {"single": [], "multi": []}
    for name, r in (("single", single), ("multi", multi)):
        while not r.done:
            r.advance(r.next_stop(16))
            if r.stops(16):
                stops[name].append(r.generated)
    assert stops["single"] == [16, 32]
    assert stops["multi"] == list(range(TURN_TOKENS, 40, TURN_TOKENS)) and len(stops["multi"]) >= 3
    assert _start(0, 0, 40).next_stop(0) == 40 and not single.stops(0)


def test_lengths_are_seeded_and_long_tailed():
    lengths = [rollout_length(0, 0, idx, i) for idx in range(512) for i in range(8)]
    assert lengths == [rollout_length(0, 0, idx, i) for idx in range(512) for i in range(8)]
    assert lengths != [rollout_length(1, 0, idx, i) for idx in range(512) for i in range(8)]
    assert abs(statistics.median(lengths) - LENGTH_MEDIAN) <= 1
    assert max(lengths) == MAX_TOKENS and statistics.mean(lengths) > 1.5 * statistics.median(lengths)


@settings(max_examples=25, deadline=None)
@given(idx=st.integers(0, 63), index=st.integers(0, 7), length=st.integers(2, 60), data=st.data())
def test_a_continued_prefix_keeps_its_tokens_versions_and_behaviour_logprobs(idx, index, length, data,
                                                                             tmp_path_factory):
    """A prefix of other weights (a restore kept the work of weights that died) continued by the
    restored ones: its tokens keep the version and log-probability they were sampled with, the
    tokens after it are the continuing weights'; the rollout's newest weights are the prefix's."""
    torch.manual_seed(1)
    newer = TinyPolicy().eval()            # the dead run's weights of step 5
    cut = data.draw(st.integers(1, length - 1))
    part = Rollout.start(newer, torch.tensor(DS[idx]["tokens"]), idx, rollout_key(0, 0, idx, index), length,
                         environment_for(idx), version=5)
    part.advance(cut)
    dp = LocalDataPlane(str(tmp_path_factory.mktemp("rows")))
    row = dp.get(dp.put_rollout(7, index, 0, part.progress_row()))
    assert int(row["policy_version"]) == 5
    cont = _resumed(idx, index, length, row)   # the restored weights, step VERSION = 3
    assert cont.newest_version == 5
    cont.advance(length)
    rows = cont.token_rows()
    assert rows["token_versions"].tolist() == [5] * cut + [VERSION] * (length - cut)
    assert rows["token_logprobs"][:cut].tolist() == part.logprobs
    # each token's log-probability is under the weights that sampled it: the prefix's under the
    # dead run's, the rest under the restored ones
    tokens = torch.tensor(DS[idx]["tokens"])
    with torch.no_grad():
        by_newer = newer.token_logprobs(tokens, rows["trace"], rows["token_positions"])
        by_restored = POLICY.token_logprobs(tokens, rows["trace"], rows["token_positions"])
    assert torch.allclose(rows["token_logprobs"][:cut], by_newer[:cut], atol=1e-5)
    assert torch.allclose(rows["token_logprobs"][cut:], by_restored[cut:], atol=1e-5)
    assert not torch.allclose(by_newer, by_restored, atol=1e-3)


def test_the_positions_name_the_policy_tokens_of_a_multi_turn_trace():
    r = _start(5, 0, 3 * TURN_TOKENS + 3)
    assert environment_for(5) is not None
    r.advance(r.length)
    rows = r.token_rows()
    positions = rows["token_positions"].tolist()
    # one observation before the first turn and after each completed one
    observations = sorted(set(range(len(r.trace))) - set(positions))
    assert observations == [0] + [1 + k * (TURN_TOKENS + 1) + TURN_TOKENS for k in range(3)]
    assert len(positions) == r.generated and rows["token_versions"].tolist() == [VERSION] * r.generated
