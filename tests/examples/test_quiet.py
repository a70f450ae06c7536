"""The example trainer prints no warning on stderr.

torchdata's `StatefulDataLoader` calls the deprecated `torch.set_vital` in its constructor
(`UserWarning: 'set_vital' is deprecated`); importing `replay` silences exactly that message from
torchdata's modules (replay/session/silenced.py), and building a trainer changes no filter. Each
check runs a fresh interpreter with `-W default` (every warning shown), as a user's terminal
would.
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-W", "default", *args], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def test_building_the_trainer_prints_no_set_vital_warning_and_leaves_filters_alone(tmp_path):
    p = run_python("-c", """if True:
        import sys, warnings
        from examples.trainer import Trainer, parse_args
        before = list(warnings.filters)
        Trainer(parse_args(["--out", sys.argv[1], "--dataset-size", "32"]))
        assert warnings.filters == before, "the trainer changed the process's warning filters"
    """, str(tmp_path / "run"))
    assert "set_vital" not in p.stderr
    assert p.stderr == ""


def test_a_short_trainer_run_prints_no_warning(tmp_path):
    p = run_python("-m", "examples.trainer", "--out", str(tmp_path / "run"), "--dataset-size", "64",
                   "--epochs", "1", "--batch-size", "8", "--workers", "2", "--ckpt-every", "2",
                   "--ckpt-save-seconds", "0")
    assert "DONE" in p.stdout
    assert "Warning" not in p.stderr and "set_vital" not in p.stderr, p.stderr


def test_a_session_user_sees_no_torchdata_noise_and_a_first_start_naming_the_absolute_path(tmp_path):
    """A trainer written as the README says (its own `StatefulDataLoader`, built after importing
    `replay`): the library silences torchdata's `set_vital` deprecation, which no caller can act
    on; a first start still warns, naming the journal's absolute path and the `Session.open`
    option that makes it an error."""
    p = run_python("-c", """if True:
        import os, sys
        from torchdata.stateful_dataloader import StatefulDataLoader
        from replay import LocalDataPlane, Session
        os.chdir(sys.argv[1])
        dl = StatefulDataLoader(list(range(4)), batch_size=2)
        Session.open("run/../run/journal", loader=dl, data_plane=LocalDataPlane("run/rows")).close()
    """, str(tmp_path))
    assert "set_vital" not in p.stderr, p.stderr
    assert "FirstStartWarning" in p.stderr and str(tmp_path / "run" / "journal") + ":" in p.stderr, p.stderr
    assert "Session.open(..., must_exist=True)" in p.stderr, p.stderr
