"""The TRL integration refuses what it was not built for, naming what to change: another TRL
version, and the AsyncGRPOConfig fields "trained at optimizer step S" needs, each refused by name
with the value to use before the trainer builds anything (imports TRL in this process)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")   # nothing here may reach the Hub
from trl.experimental.async_grpo import AsyncGRPOConfig  # noqa: E402

from replay.integrations.trl import (SUPPORTED_TRL, UnsupportedTrlConfig, UnsupportedTrlVersion,  # noqa: E402
                                    check_config, check_trl_version)
from tests.support.trl_cpu import CPU_ARGS  # noqa: E402

GOOD = dict(**CPU_ARGS, token_budget=0, max_steps=10, per_device_train_batch_size=8, num_generations=4,
            report_to="none")


def test_a_config_that_keeps_groups_whole_in_one_step_passes(tmp_path):
    check_config(AsyncGRPOConfig(output_dir=str(tmp_path), **GOOD))


@pytest.mark.parametrize("field, value, named", [
    ("max_steps", -1, "max_steps is -1"),
    ("token_budget", None, "token_budget is None"),
    ("token_budget", 4096, "token_budget is 4096"),
    ("per_device_train_batch_size", 6, "per_device_train_batch_size 6 is not a multiple of num_generations 4"),
])
def test_a_field_that_could_split_a_group_or_stop_by_epoch_is_refused(tmp_path, field, value, named):
    with pytest.raises(UnsupportedTrlConfig) as info:
        check_config(AsyncGRPOConfig(output_dir=str(tmp_path), **{**GOOD, field: value}))
    assert named in str(info.value)


def test_another_trl_version_is_refused():
    check_trl_version(SUPPORTED_TRL)
    with pytest.raises(UnsupportedTrlVersion, match=r"TRL 1\.17\.0 is installed.*trl==1\.16\.0"):
        check_trl_version("1.17.0")
