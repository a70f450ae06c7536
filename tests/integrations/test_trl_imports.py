"""`import replay` (and `import replay.integrations`) never imports TRL, verl, transformers or torch:
an integration is imported by its users only, with its extra installed. The modules every
integration shares (the rollout pipeline, the checkpoint folders) import no framework either; the
TRL integration refuses an untested TRL as it is imported, before it touches TRL's internals."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMEWORKS = ("trl", "verl", "ray", "transformers", "accelerate", "datasets", "torch")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def _loaded_after(statement: str) -> set[str]:
    p = _run(f"import sys\n{statement}\nprint(' '.join(m for m in {FRAMEWORKS!r} if m in sys.modules))")
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


def test_import_replay_and_its_integrations_package_import_no_framework():
    assert _loaded_after("import replay, replay.integrations") == set()


def test_the_modules_every_integration_shares_import_no_framework():
    assert _loaded_after("import replay.integrations.pipeline, replay.integrations.checkpoint_folders") == set()


def test_importing_the_trl_integration_imports_trl():
    """The checks above can fail: the integration module itself brings TRL and transformers."""
    assert {"trl", "transformers", "torch"} <= _loaded_after("import replay.integrations.trl")


def test_an_untested_trl_is_refused_as_the_integration_is_imported():
    """A TRL other than 1.16.0 (here a stand-in module of version 1.17.0) stops the import with
    what is installed, what is supported and what to do, before anything of TRL's is imported."""
    p = _run("import sys, types\n"
             "sys.modules['trl'] = types.ModuleType('trl'); sys.modules['trl'].__version__ = '1.17.0'\n"
             "import replay.integrations.trl")
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("replay.integrations.trl_errors.UnsupportedTrlVersion: TRL 1.17.0 is installed"), last
    assert "tested on TRL 1.16.0" in last and "install 'ownership-journal[trl]' (trl==1.16.0)" in last
