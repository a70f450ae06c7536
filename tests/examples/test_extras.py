"""The demo's optional flags without their extra: `--ray` without Ray and `--replica` without
obstore are usage errors (exit 2) naming the extra to install, from `journal-demo` and from
the trainer alike, instead of an ImportError (or an AttributeError on a bare `ray/` directory,
which Ray itself leaves in /tmp) after the run started."""

from __future__ import annotations

import argparse
import importlib
import sys

import pytest

from examples import chaos, trainer
from examples.extras import require

CASES = [("ray", ["--ray"], "pip install 'ownership-journal[ray]'"),
         ("obstore", ["--replica", "s3://bucket/run"], "pip install 'ownership-journal[replica]'")]


@pytest.mark.parametrize("module,flags,install", CASES)
@pytest.mark.parametrize("parse", [chaos.parse_args, lambda argv: trainer.parse_args(["--out", "run", *argv])],
                         ids=["journal-demo", "trainer"])
def test_a_flag_without_its_extra_is_a_usage_error(monkeypatch, capsys, module, flags, install, parse):
    monkeypatch.setitem(sys.modules, module, None)   # importlib: not importable
    with pytest.raises(SystemExit) as exit_:
        parse(flags)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{flags[0]} needs {module}, which is not installed" in err and install in err


def test_a_bare_directory_is_not_an_installed_package(tmp_path, monkeypatch, capsys):
    (tmp_path / "oj_extra_probe").mkdir()          # a namespace package, as /tmp/ray is
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit):
        require(argparse.ArgumentParser(prog="demo"), "--probe", "oj_extra_probe", "probe")
    assert "--probe needs oj_extra_probe" in capsys.readouterr().err
    (tmp_path / "oj_extra_probe" / "__init__.py").write_text("")
    importlib.invalidate_caches()
    require(argparse.ArgumentParser(prog="demo"), "--probe", "oj_extra_probe", "probe")   # installed: no error
