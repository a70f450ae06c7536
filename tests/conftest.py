"""Shared fixtures for the tests: `fast_tmp` (per test) and `fast_tmp_module` (per module) are
scratch directories on tmpfs when there is one (see tests/support/scratch.py); `s3` is one
real S3 server on 127.0.0.1 per session (moto's server mode, started by the first test that
asks), `prefix` a fresh prefix in its bucket per test, `proxy` a fault-injecting proxy in
front of it (tests/support/s3_support.py)."""

from __future__ import annotations

import os

# Every Ray the tests start binds 127.0.0.1 only (DESIGN 10). Ray reads this once, when it is
# first imported, by whichever test module imports it (or verl) first: so here, before any.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import pytest  # noqa: E402

from tests.support.s3_support import S3, FaultProxy  # noqa: E402
from tests.support.scratch import scratch_dir  # noqa: E402


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


@pytest.fixture(scope="session")
def s3():
    server = S3()
    yield server
    server.stop()


@pytest.fixture
def proxy(s3):
    p = FaultProxy(s3.port)
    yield p
    p.stop()


@pytest.fixture
def prefix():
    return S3.prefix()
