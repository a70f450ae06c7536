"""The verl integration refuses what it was not built for, naming what to change: another verl
version, and the config fields under which a movement could not be journaled exactly."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from replay.integrations.verl import SUPPORTED_VERL, UnsupportedVerlConfig, UnsupportedVerlVersion, check_verl_version
from replay.integrations.verl_rollouter import check_rollouter_config


def test_another_verl_version_is_refused():
    check_verl_version(SUPPORTED_VERL)
    with pytest.raises(UnsupportedVerlVersion, match=r"verl 0\.10\.0 is installed.*verl==0\.9\.1"):
        check_verl_version("0.10.0")


def _config(**trainer):
    return OmegaConf.create({"trainer": {"resume_mode": "auto", "default_hdfs_dir": None,
                                         "max_actor_ckpt_to_keep": None, **trainer}})


@pytest.mark.parametrize("field, value, says", [
    ("resume_mode", "disable", "resume_mode is 'disable': set 'auto'"),
    ("default_hdfs_dir", "hdfs://x", "default_hdfs_dir is 'hdfs://x': set null"),
    ("max_actor_ckpt_to_keep", 1, "keep at least 2"),
])
def test_config_fields_the_journal_needs(field, value, says):
    check_rollouter_config(_config())
    with pytest.raises(UnsupportedVerlConfig, match=says):
        check_rollouter_config(_config(**{field: value}))
