"""The optional packages behind the demo's flags: a missing one is a usage error naming the
extra that brings it."""

from __future__ import annotations

import argparse
import importlib.util


def require(p: argparse.ArgumentParser, flag: str, module: str, extra: str) -> None:
    """A usage error unless `module` is installed (a bare directory of that name on sys.path,
    such as Ray's own /tmp/ray when started in /tmp, is a namespace package: not installed)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        p.error(f"{flag} needs {module}, which is not installed: pip install 'ownership-journal[{extra}]' "
                f"(in a checkout: pip install -e '.[{extra}]')")
