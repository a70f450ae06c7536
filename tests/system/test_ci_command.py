"""`.ci/run` runs the README's own Quick start test command (read by
`.ci/quickstart-test-command`), so CI and the README cannot drift apart."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, ".ci", "quickstart-test-command")


def command_of(readme: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, readme], capture_output=True, text=True, timeout=60)


def test_the_ci_command_is_the_readme_quick_start_test_line():
    p = command_of(os.path.join(ROOT, "README.md"))
    assert p.returncode == 0, p.stderr
    command = p.stdout.rstrip("\n")
    assert "\n" not in command
    with open(os.path.join(ROOT, "README.md")) as f:
        quick_start = f.read().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    assert f"\n    {command}\n" in quick_start
    # the torch pin is installed first, then the project with its test extra, then the tests run
    assert command.index("pip install torch==") < command.index("pip install -e '.[test]'") \
        < command.index("python -m pytest tests")


def test_a_readme_without_the_test_line_fails_loudly(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# p\n\n## Quick start\n\n    pip install -e .\n\n## Tests\n\n    python -m pytest\n")
    p = command_of(str(readme))
    assert p.returncode == 1 and p.stdout == ""
    assert str(readme) in p.stderr and "exactly one" in p.stderr and "found: none" in p.stderr


def test_a_readme_with_two_test_lines_fails_loudly(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("## Quick start\n\n    python -m pytest tests -q\n    pytest tests\n")
    p = command_of(str(readme))
    assert p.returncode == 1 and p.stdout == "" and "python -m pytest tests -q" in p.stderr


def test_the_quick_start_main_job_installs_the_demo_extra_only():
    """The main job's line installs what `journal-demo` needs (the `demo` extra), not the
    test extra's Ray, moto and matplotlib."""
    with open(os.path.join(ROOT, "README.md")) as f:
        quick_start = f.read().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    (main_job,) = [line.strip() for line in quick_start.splitlines()
                   if line.startswith("    ") and line.rstrip().endswith("&& journal-demo")]
    assert main_job == "pip install torch==2.13.0 && pip install -e '.[demo]' && journal-demo"
