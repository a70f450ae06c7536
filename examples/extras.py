"""The optional packages behind the demo's flags: a missing one is a usage error naming the
extra that brings it."""

from __future__ import annotations

import argparse
import importlib.util


def require(p: argparse.ArgumentParser, flag: str, module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        p.error(f"{flag} needs {module}, which is not installed: pip install 'ownership-journal[{extra}]' "
                f"(in a checkout: pip install -e '.[{extra}]')")
