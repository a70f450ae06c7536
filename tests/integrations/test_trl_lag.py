"""The TRL integration's restore bound is TRL's own: `max_staleness` weight syncs of
`weight_sync_steps` steps (`policy_lag`), passed by `train()` to `Session.open(max_policy_lag=)`,
so a restore keeps the groups a crashed run finished with weights that many steps newer than
its checkpoint, which TRL trains as any sample that old. A `max_policy_lag` in `session_options`
that says otherwise is refused. (Imports TRL in this process; builds the tiny model, trains
nothing.)"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")   # nothing here may reach the Hub
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOConfig  # noqa: E402

from replay import LocalDataPlane, Session  # noqa: E402
from replay.integrations.trl import (JournaledAsyncGRPOTrainer, UnsupportedTrlConfig, _IndexedRows,  # noqa: E402
                                     policy_lag)
from tests.support.trl_cpu import (CPU_ARGS, InProcessWeightTransfer, LocalModelGenerator,  # noqa: E402
                                         apply_cpu_workarounds)
from replay.session.work import TRAIN  # noqa: E402
from tests.support.trl_tiny import build_dataset, build_model_dir, build_tokenizer, make_reward  # noqa: E402

GENERATIONS = 2


def _config(tmp_path, **fields) -> AsyncGRPOConfig:
    return AsyncGRPOConfig(output_dir=str(tmp_path / "trainer"), **CPU_ARGS, token_budget=0, max_steps=4,
                           per_device_train_batch_size=GENERATIONS, num_generations=GENERATIONS,
                           max_completion_length=4, report_to="none", disable_tqdm=True, **fields)


@pytest.mark.parametrize("staleness, sync_steps, steps", [(0, 1, 0), (4, 1, 4), (3, 2, 6)])
def test_the_bound_is_trls_staleness_in_optimizer_steps(tmp_path, staleness, sync_steps, steps):
    args = _config(tmp_path, max_staleness=staleness, weight_sync_steps=sync_steps)
    assert policy_lag(args, {}) == steps
    assert policy_lag(args, {"max_policy_lag": steps}) == steps


def test_a_session_option_that_contradicts_trl_is_refused(tmp_path):
    with pytest.raises(UnsupportedTrlConfig) as info:
        policy_lag(_config(tmp_path, max_staleness=4), {"max_policy_lag": 1})
    assert "max_policy_lag=1" in str(info.value) and "max_staleness 4" in str(info.value)


class _Opened(Exception):
    """Raised by `_OpenOnly` once the session is open: what it handed back, by group."""


class _OpenOnly(JournaledAsyncGRPOTrainer):
    """The journaled trainer up to its session's restore (`train()` opens it), training nothing:
    what the restore handed back, by dataset row (a group taken after the checkpoint comes back
    under a fresh id)."""

    def _resume_point(self, requested):
        raise _Opened(self.session.step, {w.idx: w.kind for w in self.session.resume_work})


def _crashed_run(journal_dir: str, dataset, data_plane) -> int:
    """A run that trained one group at step 1 and committed that checkpoint, then finished a group
    with its weights of step 2 and died before training it. Returns that group's dataset row."""
    rows = _IndexedRows(dataset)
    s = Session.open(journal_dir, dataset=rows, collate_fn=list, data_plane=data_plane,
                     loader=StatefulDataLoader(rows, batch_size=1, collate_fn=list))
    batches = s.batches()
    (first,) = s.take(next(batches))
    s.admit([first], step=1, policy_version=0)
    s.finish(first, {"samples": []}, policy_version=0)
    s.trained([first], step=1)
    s.checkpoint(1, save=lambda: None)
    batch = next(batches)
    (second,) = s.take(batch)
    s.admit([second], step=2, policy_version=1)
    s.finish(second, {"samples": []}, policy_version=2)   # the step-2 weights, which die with the run
    s.close()
    return batch[0]["idx"]


@pytest.mark.parametrize("staleness", [0, 1])
def test_train_passes_trls_staleness_to_the_restore(tmp_path, staleness):
    apply_cpu_workarounds()
    tokenizer = build_tokenizer()
    model_dir = build_model_dir(str(tmp_path / "tiny-model"), tokenizer)
    dataset = build_dataset(8)
    journal_dir, data_plane = str(tmp_path / "journal"), LocalDataPlane(str(tmp_path / "rows"))
    newer = _crashed_run(journal_dir, dataset, data_plane)
    generator = LocalModelGenerator(model_dir, tokenizer, make_reward(tokenizer), max_new_tokens=4, seed=0)
    trainer = _OpenOnly(model_dir, args=_config(tmp_path, max_staleness=staleness), train_dataset=dataset,
                        processing_class=tokenizer, weight_transfer=InProcessWeightTransfer(generator),
                        generate=generator, journal_dir=journal_dir, data_plane=data_plane)
    with pytest.raises(_Opened) as opened:
        trainer.train(resume_from_checkpoint=True)
    step, kinds = opened.value.args
    assert step == 1
    # a bound of one step keeps the group the step-2 weights finished: it comes back to train;
    # without it the group comes back to generate again
    assert (kinds[newer] == TRAIN) == (staleness >= 1), kinds
