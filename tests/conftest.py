"""Shared fixtures for the tests: `fast_tmp` (per test) and `fast_tmp_module` (per module) are
scratch directories on tmpfs when there is one (see tests/support/scratch.py)."""

from __future__ import annotations

import pytest

from tests.support.scratch import scratch_dir


def pytest_configure(config):
    # The tests reopen journals without resume= on purpose (to check what is on disk), which
    # warns past a checkpoint (JournalWarning); tests of that warning record it themselves.
    config.addinivalue_line("filterwarnings", "ignore::journal.JournalWarning")


@pytest.fixture
def fast_tmp(tmp_path):
    with scratch_dir(fallback=tmp_path) as d:
        yield d


@pytest.fixture(scope="module")
def fast_tmp_module(tmp_path_factory):
    with scratch_dir(fallback=tmp_path_factory.mktemp("fast")) as d:
        yield d
