"""Ctrl-C during a long `journal-inspect` scan: one line on stderr, exit 130, no traceback, also
when the user presses it again and again while the command stops."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time

import pytest

from bench.inspect import build
from tests.support.cli_run import COMMAND


@pytest.fixture(scope="module")
def long_journal(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("interrupt") / "journal")
    build(path, 300_000)
    return path


def _read(fd: int, timeout: float) -> bytes:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # the child closed its end
        return b""


def test_ctrl_c_during_a_scan_prints_one_line(long_journal):
    master, slave = pty.openpty()
    env = {**os.environ, "JOURNAL_INSPECT_PROGRESS_DELAY": "0"}
    p = subprocess.Popen([*COMMAND, "audit", long_journal], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"%" not in seen:  # a progress bar is drawn: the scan has begun
            assert p.poll() is None and time.monotonic() < deadline, seen.decode(errors="replace")
            seen += _read(master, 0.1)
        while p.poll() is None:  # a user pressing Ctrl-C repeatedly
            p.send_signal(signal.SIGINT)
            seen += _read(master, 0.002)
        while chunk := _read(master, 0.2):
            seen += chunk
    finally:
        os.close(master)
        p.wait(10)
    stderr = seen.decode(errors="replace")
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    # what a terminal shows of each line: the text after the last carriage return or erase
    # (the pty turns each newline into \r\n)
    shown = [re.split(r"\r|\x1b\[K", line)[-1] for line in stderr.replace("\r\n", "\n").split("\n")]
    assert [ln for ln in shown if "interrupted" in ln] == ["journal-inspect: interrupted"], stderr
