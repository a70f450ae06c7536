"""A real (non-editable) build ships every package of the tree under the names DESIGN 8
allows, and what it installs runs: a subpackage left out of pyproject's package list breaks
the installed console scripts while tests from the source tree still pass, and a generic
top-level name such as `examples` would collide with any other project's.

The checkout's examples/ ships as `replay.demo` (pyproject's package-dir): `journal-demo`
runs from the installed wheel (its trainer child as `python -m replay.demo.trainer`) and
from a checkout (`python -m examples.chaos`)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALLED_AS = {"journal": "journal", "snapshot": "snapshot", "replay": "replay", "examples": "replay/demo"}
TOP_LEVEL = {"journal", "snapshot", "replay"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: a build/ left in the tree would hide a missing package
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                             "tests", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp), str(src)], check=True, capture_output=True, timeout=300)
    (built,) = tmp.glob("*.whl")
    return built


def _dist_info(names: set[str], leaf: str) -> str:
    (path,) = [n for n in names if n.endswith(f".dist-info/{leaf}")]
    return path


def test_the_wheel_holds_every_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.parent.relative_to(ROOT)) for top in INSTALLED_AS for p in (ROOT / top).rglob("__init__.py")}
    assert {"replay/cli", "examples"} <= packages
    installed = {INSTALLED_AS[p.split("/")[0]] + p[len(p.split("/")[0]):] for p in packages}
    missing = sorted(p for p in installed if f"{p}/__init__.py" not in names)
    assert not missing, f"packages left out of the wheel: {missing}"
    modules = {str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.py")}
    assert {f"replay/demo/{m}" for m in modules} <= names


def test_the_wheel_claims_only_the_project_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        top_level_txt = set(z.read(_dist_info(names, "top_level.txt")).decode().split())
        entry_points = z.read(_dist_info(names, "entry_points.txt")).decode()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == TOP_LEVEL
    assert top_level_txt == TOP_LEVEL
    assert "journal-demo = replay.demo.chaos:main" in entry_points


def test_the_installed_wheel_runs_journal_demo(wheel, tmp_path):
    """Installed from the wheel alone (outside the checkout, no PYTHONPATH to it): the console
    script's help, and a short run whose trainer child is the installed `replay.demo.trainer`."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(target)}
    demo = [str(target / "bin" / "journal-demo")]
    usage = subprocess.run(demo + ["--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("usage: journal-demo") and "python -m replay.demo.trainer --help" in usage.stdout
    run = subprocess.run(demo + ["--out", str(tmp_path / "run"), "--kills", "1", "--epochs", "1",
                                 "--dataset-size", "64", "--json"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["ok"] and summary["twice"] == 0 and summary["lost"] == 0
    where = subprocess.run([sys.executable, "-c", "import replay.demo.trainer as t; print(t.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert where.stdout.strip() == str(target / "replay" / "demo" / "trainer.py")   # what the child ran


def test_the_checkout_runs_journal_demo():
    usage = subprocess.run([sys.executable, "-m", "examples.chaos", "--help"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert usage.returncode == 0, usage.stderr
    assert "python -m examples.trainer --help" in usage.stdout
