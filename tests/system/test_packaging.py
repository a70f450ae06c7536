"""A real (non-editable) build ships every package of the tree: a subpackage left out of
pyproject's package list breaks the installed console scripts while tests from the source
tree still pass."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOP = ("journal", "snapshot", "replay", "examples")


def test_the_wheel_holds_every_package(tmp_path):
    src = tmp_path / "src"  # a copy: a build/ left in the tree would hide a missing package
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                             "tests", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(str(p.parent.relative_to(ROOT)) for top in TOP for p in (ROOT / top).rglob("__init__.py"))
    assert "replay/cli" in packages
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert not missing, f"packages left out of the wheel: {missing}"
