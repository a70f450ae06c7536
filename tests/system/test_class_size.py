"""No class of the library packages is longer than 400 lines (one class, one job), not counting
the two inlined hot paths every replay runs, which keep their named exemption from the
function-length budget (`test_function_length.HOT_PATHS`) here too."""

from __future__ import annotations

import ast

from tests.system.test_function_length import HOT_PATHS, ROOT

LIMIT = 400


def _class_sizes(rel: str, tree: ast.Module):
    """(name, line, lines) of every class in `tree`, its hot-path methods' lines left out."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            exempt = sum(f.end_lineno - f.lineno + 1 for f in node.body
                         if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, f.name) in HOT_PATHS)
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1 - exempt


def test_library_classes_are_small():
    big = []
    for pkg in ("journal", "snapshot", "replay"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for name, line, lines in _class_sizes(rel, ast.parse(path.read_text())):
                if lines > LIMIT:
                    big.append(f"{rel}:{line} {name} ({lines} lines)")
    assert not big, "split these by job: " + ", ".join(big)


def test_the_budget_can_fail():
    """The measure counts a class's lines, less only its hot-path methods."""
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT + 1))
    tree = ast.parse(f"class Big:\n{body}\n")
    assert [lines for _, _, lines in _class_sizes("journal/x.py", tree)] == [LIMIT + 2]
    hot = "class Reader:\n    def segment_records(self):\n" + "\n".join(f"        x{i} = {i}" for i in range(LIMIT))
    assert [lines for _, _, lines in _class_sizes("journal/reader.py", ast.parse(hot))] == [1]
