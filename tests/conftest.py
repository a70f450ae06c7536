"""Shared fixtures for the journal tests.

`fast_tmp` is a scratch directory on tmpfs (/dev/shm) when there is one: the torn-tail,
bit-flip and crash-image tests open journals hundreds of times, and their crash semantics
are simulated by editing files, so real-disk fsync latency would only make them slow.
Tests that need a real file system (the SIGKILL crash loop, the lock) use `tmp_path`."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config):
    # The tests reopen journals without resume= on purpose (to check what is on disk), which
    # warns past a checkpoint (JournalWarning); tests of that warning record it themselves.
    config.addinivalue_line("filterwarnings", "ignore::journal.JournalWarning")


@pytest.fixture
def fast_tmp(tmp_path):
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    if base is None:
        yield tmp_path
        return
    d = tempfile.mkdtemp(prefix="oj-test-", dir=base)
    try:
        from pathlib import Path
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def fast_tmp_module(tmp_path_factory):
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    if base is None:
        yield tmp_path_factory.mktemp("fast")
        return
    d = tempfile.mkdtemp(prefix="oj-test-", dir=base)
    try:
        from pathlib import Path
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
