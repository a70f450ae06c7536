"""`journal-inspect --help` and every subcommand on a journal whose loader states hold no tensor
(and that has no cut, whose files are .pt) run without importing torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.cli_journals import clean_run

_PROBE = ("import sys, replay.cli as c\n"
          "try:\n"
          "    rc = c.main(sys.argv[1:])\n"
          "except SystemExit as exc:\n"
          "    rc = exc.code\n"
          "sys.stdout.flush()\n"
          "print('TORCH-LOADED' if 'torch' in sys.modules else 'NO-TORCH', rc, file=sys.stderr)\n")


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("no-torch") / "journal")
    clean_run(path)
    assert not os.path.isdir(os.path.join(path, "snapshots"))
    return path


@pytest.mark.parametrize("argv", [
    ["--help"], ["summary", "{j}"], ["log", "{j}"], ["group", "{j}", "1"], ["state", "{j}"],
    ["cuts", "{j}"], ["verify", "{j}"], ["audit", "{j}"],
    ["export", "{j}", "--out", "{tmp}/events.jsonl"], ["steps", "{j}"], ["timeline", "{j}"],
], ids=lambda argv: argv[0])
def test_no_torch(journal, tmp_path, argv):
    args = [a.format(j=journal, tmp=tmp_path) for a in argv]
    p = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120)
    verdict, code = p.stderr.strip().splitlines()[-1].split()
    assert verdict == "NO-TORCH", f"journal-inspect {' '.join(args)} imported torch\n{p.stderr}"
    assert code == "0", p.stderr


_TQDM_PROBE = ("import sys, replay.cli as c\n"
               "try:\n"
               "    rc = c.main(sys.argv[1:])\n"
               "except SystemExit as exc:\n"
               "    rc = exc.code\n"
               "sys.stdout.flush()\n"
               "print('TQDM-LOADED' if 'tqdm' in sys.modules else 'NO-TQDM', rc, file=sys.stderr)\n")


@pytest.mark.parametrize("argv", [["--help"], ["summary", "{j}"], ["verify", "{j}"], ["audit", "{j}"]],
                         ids=lambda argv: argv[0])
def test_no_tqdm_without_a_terminal(journal, argv):
    """tqdm draws the progress bars, which only a terminal shows: through a pipe it is never
    imported."""
    args = [a.format(j=journal) for a in argv]
    p = subprocess.run([sys.executable, "-c", _TQDM_PROBE, *args], capture_output=True, text=True,
                       timeout=120)
    verdict, code = p.stderr.strip().splitlines()[-1].split()
    assert (verdict, code) == ("NO-TQDM", "0"), p.stderr
