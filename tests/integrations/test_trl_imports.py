"""`import replay` (and `import replay.integrations`) never imports TRL, transformers or torch: the
integration is imported by its users only, with the `trl` extra installed."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _loaded_after(statement: str) -> set[str]:
    code = (f"import sys\n{statement}\n"
            "print(' '.join(m for m in ('trl', 'transformers', 'accelerate', 'datasets', 'torch') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


def test_import_replay_and_its_integrations_package_import_no_framework():
    assert _loaded_after("import replay, replay.integrations") == set()


def test_importing_the_trl_integration_imports_trl():
    """The check above can fail: the integration module itself brings TRL and transformers."""
    assert {"trl", "transformers", "torch"} <= _loaded_after("import replay.integrations.trl")
