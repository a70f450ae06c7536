"""Running `python -m bench` in a subprocess from the checkout, for the benchmarks' tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def bench(argv: list[str], *, timeout: float) -> subprocess.CompletedProcess:
    """`python <argv>` run from the checkout (this tree first on the path), output captured."""
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def quick_report(name: str, *, timeout: float) -> dict:
    """The JSON report of `python -m bench NAME --quick --json`, which must exit 0."""
    p = bench(["-m", "bench", name, "--quick", "--json"], timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)
