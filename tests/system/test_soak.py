"""Issue 7.5: soaks with hundreds of SIGKILLs, behind environment variables (skipped in CI).

    OJ_SOAK_KILLS=300 python -m pytest tests/system/test_soak.py -s

* the journal's crash loop (tests/journal/test_crash_loop.py: a child appending with
  sync="always", SIGKILLed at random moments, every acknowledged commit checked after each
  reopen) with OJ_SOAK_KILLS kills, run as its own pytest process;
* the example trainer's chaos run (`journal-demo`, examples/chaos.py: SIGKILLs during
  checkpoint saves, compactions, restores and at random, then the exactly-once audit) with
  OJ_SOAK_KILLS kills over the default 2048-prompt x 2-epoch run.

OJ_SOAK_SEED (default 1) seeds both; OJ_SOAK_ONLY=crash_loop|chaos runs one of them. Each
prints its result line (kills, wall time, audit).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

KILLS = int(os.environ.get("OJ_SOAK_KILLS", "0") or 0)
SEED = int(os.environ.get("OJ_SOAK_SEED", "1"))
ONLY = os.environ.get("OJ_SOAK_ONLY", "")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(KILLS <= 0, reason="soak: set OJ_SOAK_KILLS (e.g. 300) to run")


def _say(request, text: str) -> None:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\n" + text, flush=True)


@pytest.mark.skipif(ONLY not in ("", "crash_loop"), reason="OJ_SOAK_ONLY")
def test_soak_journal_crash_loop(request):
    env = dict(os.environ, OJ_CRASH_LOOP_KILLS=str(KILLS), OJ_CRASH_LOOP_SEED=str(SEED),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           os.path.join(ROOT, "tests", "journal", "test_crash_loop.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    _say(request, f"soak crash loop: {KILLS} SIGKILLs (seed {SEED}), exit {proc.returncode}, "
                  f"{wall:.0f} s\n{tail}")
    assert proc.returncode == 0, tail


@pytest.mark.skipif(ONLY not in ("", "chaos"), reason="OJ_SOAK_ONLY")
def test_soak_chaos(request, tmp_path):
    from examples import chaos
    o = chaos.Options(out=str(tmp_path / "run"), seed=SEED, kills=KILLS, verbose=False,
                      timeout=max(900.0, 15.0 * KILLS))
    s = chaos.run(o)
    _say(request, f"soak chaos (journal-demo --kills {KILLS} --seed {SEED}):\n{chaos.render(s)}")
    assert s["kills"] >= KILLS
    assert s["ok"], chaos.render(s)
    assert s["twice"] == 0 and s["lost"] == 0
