"""examples/minimal_trainer.py, the integration guide's trainer on `Session`, and the same
trainer on `AsyncSession` (examples/minimal_async_trainer.py), SIGKILLed at seeded random
moments (during training, checkpoint saves and compaction, and while it starts and restores)
and restarted until it finishes; the journal's audit then finds every step trained with a full
batch, no row trained twice and none lost, and some restart was handed back the rows the killed
run took after its last checkpoint (adopted by the restore).

OJ_MINIMAL_KILLS=N for more kills (default 4). The run directory is on tmpfs when there is one:
a SIGKILL loses nothing the kernel already has, so tmpfs crashes exactly like a disk here.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from journal import CheckpointBegun, Reader
from tests.support.cli_run import cli_json
from examples import minimal_trainer

KILLS = int(os.environ.get("OJ_MINIMAL_KILLS", "4") or 4)
STEPS = max(300, 40 * KILLS)   # a kill lands at most 30 steps after a resume: room for all of them


TRAINERS = ["examples.minimal_trainer", "examples.minimal_async_trainer"]


def _start(module, run_dir, stderr):
    return subprocess.Popen([sys.executable, "-m", module, str(run_dir), "--steps", str(STEPS)],
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def _run_once(module, run_dir, stderr, steps_after_resume: int | None, delay: float | None
              ) -> tuple[int, list[str]]:
    """One incarnation: kill it `delay` s after it reports the `steps_after_resume`-th step past
    the one it resumed at (None: `delay` s after its start, while it imports or restores; with
    no delay it is not killed); returns (status, stdout lines)."""
    proc = _start(module, run_dir, stderr)
    lines: list[str] = []
    reached = threading.Event()

    def pump():
        resumed = None
        for line in proc.stdout:
            lines.append(line.strip())
            parts = line.split()
            if parts[:3] == ["resumed", "at", "step"]:
                resumed = int(parts[3])
            elif (steps_after_resume is not None and parts[:1] == ["step"]
                  and int(parts[1]) >= resumed + steps_after_resume):
                reached.set()
        reached.set()   # it ended on its own

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    if steps_after_resume is not None:
        reached.wait(120)
    if delay is not None:
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    rc = proc.wait(120)
    reader.join(10)
    return rc, lines


@pytest.mark.parametrize("module", TRAINERS)
def test_minimal_trainer_survives_sigkills_exactly_once(fast_tmp, module):
    rng = random.Random(f"minimal-trainer-kills-{KILLS}-{module}")
    run_dir = fast_tmp / "run"
    kills, resumes = 0, []
    with open(fast_tmp / "stderr.log", "w") as stderr:
        while True:
            if kills < KILLS:
                if kills and rng.random() < 0.25:
                    target, delay = None, rng.uniform(0.2, 1.5)   # while starting or restoring
                else:   # training, saving a checkpoint or compacting
                    # the first one after a checkpoint, so a restore leaves a dead tail behind
                    first = minimal_trainer.CKPT_EVERY + 1 if not kills else 1
                    target, delay = rng.randint(first, 30), rng.uniform(0, 0.02)
            else:
                target, delay = None, None   # let it finish
            rc, lines = _run_once(module, run_dir, stderr, target, delay)
            resumes += [line for line in lines if line.startswith("resumed at step")]
            if rc == 0:
                assert lines[-1] == f"done at step {STEPS}", lines[-3:]
                break
            assert rc == -signal.SIGKILL, (rc, (fast_tmp / "stderr.log").read_text()[-3000:])
            kills += 1
    assert kills == KILLS
    doc = cli_json("audit", str(run_dir / "journal"))
    assert doc["clean"] is True
    totals = doc["totals"]
    assert totals["trained_more_count"] == 0 and totals["lost_count"] == 0, totals
    assert totals["pending_retake"] == 0, totals
    # every step of the final history trained one full batch, so nothing went missing silently
    assert totals["trained_once"] == STEPS * minimal_trainer.BATCH, totals
    assert totals["rows_taken"] == totals["trained_once"] + totals["dropped"] + totals["in_flight"]
    assert totals["dropped"] == 0, totals   # a failed rollout is retried, never its group dropped
    assert doc["dead_tails"], "a kill after a checkpoint leaves a dead tail"
    # restarts resumed past the first checkpoint, and some were handed back in-flight groups
    assert any(not r.startswith("resumed at step 0 ") for r in resumes), resumes
    assert any(any(int(n) for n in r.split()[5::2]) for r in resumes), resumes
    # ...and the rows the killed run took after the checkpoint, adopted (the audit above counts
    # each row once; "kept": their rollouts sealed with the checkpoint's weights, which this
    # trainer, generating its oldest groups first, seldom has)
    assert any(int(r.split()[r.split().index("adopted") + 1]) > 0 for r in resumes), resumes


def test_minimal_trainer_rerun_after_the_end_changes_nothing(fast_tmp):
    """A finished run started again restores at its last step and trains nothing more; without
    the weights of that step it stops and says which file is missing."""
    run_dir = fast_tmp / "run"
    cmd = [sys.executable, "-m", "examples.minimal_trainer", str(run_dir), "--steps", "12"]
    for _ in range(2):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[0].startswith("resumed at step 12 ")
    assert r.stdout.splitlines()[-1] == "done at step 12"
    assert cli_json("audit", str(run_dir / "journal"))["totals"]["trained_once"] == 12 * minimal_trainer.BATCH
    os.unlink(minimal_trainer.weights_path(str(run_dir), 12))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "LoadWeightsFailed" in r.stderr and "committed checkpoint of step 12" in r.stderr
    assert minimal_trainer.weights_path(str(run_dir), 12) in r.stderr


def test_a_kill_at_the_announced_checkpoint_save_lands_after_its_begin_and_resumes_cleanly(fast_tmp):
    """The trainer prints `checkpoint N saving` inside a checkpoint (docs/testing.md: kill at the
    moments a trainer announces): SIGKILLed on reading it, the checkpoint was begun, and the
    restart resumes at it (its commit won the race) or at the one before, then finishes; every
    step trained one full batch, none twice."""
    run_dir = fast_tmp / "run"
    cmd = [sys.executable, "-m", "examples.minimal_trainer", str(run_dir), "--steps", "15"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if line.strip() == f"checkpoint {2 * minimal_trainer.CKPT_EVERY} saving":
            proc.send_signal(signal.SIGKILL)
            break
    assert proc.wait(120) == -signal.SIGKILL
    proc.stdout.close()
    begun = {ev.step for r in Reader(str(run_dir / "journal")).records() for ev in r.commit.events
             if type(ev) is CheckpointBegun}
    assert 2 * minimal_trainer.CKPT_EVERY in begun
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = int(r.stdout.split()[3])
    assert resumed in (minimal_trainer.CKPT_EVERY, 2 * minimal_trainer.CKPT_EVERY), r.stdout[:200]
    totals = cli_json("audit", str(run_dir / "journal"))["totals"]
    assert totals["trained_more_count"] == 0 and totals["trained_once"] == 15 * minimal_trainer.BATCH, totals


def _readme_snippet(directory) -> str:
    """The README's first code block, written into `directory` as snippet.py."""
    readme = open(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "README.md")).read()
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    (directory / "snippet.py").write_text(snippet)
    return str(directory / "snippet.py")


def _snippet_audit(directory) -> dict:
    totals = cli_json("audit", str(directory / "run" / "journal"))["totals"]
    assert totals["trained_more_count"] == 0 and totals["lost_count"] == 0, totals
    return totals


SNIPPET_ROWS = 8 * 2   # its dataset's 8 rows, in each of its 2 passes


def test_readme_opening_snippet_runs_on_a_first_start_and_a_restart(fast_tmp):
    """Every name the README's first code block uses is defined: it runs as it is, twice. The
    first run trains both passes and checkpoints its last step; the restart restores that step,
    takes nothing more and calls the final checkpoint again."""
    snippet = _readme_snippet(fast_tmp)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    warned, restored = [], []
    for _ in range(2):
        r = subprocess.run([sys.executable, snippet], cwd=fast_tmp, capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        warned.append("FirstStartWarning" in r.stderr and str(fast_tmp / "run" / "journal") in r.stderr)
        restored.append(r.stdout.splitlines()[0])
    assert warned == [True, False]   # the first start says so; the restart restores quietly
    assert restored[0].startswith("restored: {'step': None") and restored[1].startswith("restored: {'step': 8,")
    totals = _snippet_audit(fast_tmp)
    assert totals["rows_taken"] == SNIPPET_ROWS and totals["trained_once"] == SNIPPET_ROWS, totals


def test_readme_opening_snippet_killed_after_each_open_goes_on_exactly_once(fast_tmp):
    """The snippet SIGKILLed a moment after it reports its restore (the moment its kill window
    starts: docs/testing.md), twice, then run to its end: every row of both passes is
    trained once."""
    snippet = _readme_snippet(fast_tmp)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    rng = random.Random("readme-snippet-kills")
    killed = 0
    with open(fast_tmp / "stderr.log", "w") as stderr:
        for delay in [rng.uniform(0.0, 1.2) for _ in range(2)] + [None]:
            proc = subprocess.Popen([sys.executable, snippet], cwd=fast_tmp, stdout=subprocess.PIPE,
                                    stderr=stderr, text=True, env=env)
            assert proc.stdout.readline().startswith("restored: ")   # Session.open returned
            if delay is not None:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
            rc = proc.wait(120)
            proc.stdout.close()
            killed += rc == -signal.SIGKILL
    assert rc == 0 and killed >= 1
    totals = _snippet_audit(fast_tmp)
    assert totals["trained_once"] == SNIPPET_ROWS, totals
