"""No function of the library packages is longer than 60 lines, but the two inlined hot
paths every replay runs (the fold's commit loop and the reader's frame loop)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOT_PATHS = {("journal/fold.py", "fold_records"), ("journal/reader.py", "segment_records")}
LIMIT = 60


def test_library_functions_are_short():
    long = []
    for pkg in ("journal", "snapshot", "replay"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LIMIT and (rel, node.name) not in HOT_PATHS:
                        long.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps: " + ", ".join(long)
