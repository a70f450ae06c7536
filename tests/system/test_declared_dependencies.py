"""Every third-party module the tests need is declared in pyproject.toml.

`pip install -e '.[test]'` in a fresh environment must give the tests everything they
import (verl excepted: the README's test command installs it with `pip install --no-deps`,
since its metadata asks for a transformers older than TRL's pin; what verl imports is in the
test extra): the scan covers every import statement (module level and inside functions) of
tests/*.py and of the project's packages those files import (transitively), and requires
each third-party module to be declared in `dependencies` or the `test` extra. An import
inside a `try` that handles ImportError is optional (e.g. matplotlib for `--png`) and
exempt. numpy is also needed without an `import numpy`: `torch.Tensor.numpy()` (which
tests/support/equality.py calls) raises "Numpy is not available" without it, and torch warns
`Failed to initialize NumPy` at import; so a `.numpy()` call counts as a use of numpy.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# import name -> distribution name, where they differ
DISTRIBUTION_OF = {"yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn", "straw": "straw-queue",
                   "hydra": "hydra-core"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r.strip()).group()) for r in requirements}


def _handles_import_error(node: ast.Try) -> bool:
    names = set()
    for h in node.handlers:
        for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]):
            names.add(getattr(t, "id", None))
    return bool(names & {"ImportError", "ModuleNotFoundError", None})


def _required_modules(tree: ast.AST) -> set[str]:
    """Top-level names of the modules `tree` needs (optional imports left out)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _handles_import_error(node):
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "numpy" and not node.args):
            found.add("numpy")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def scan_test_imports() -> dict[str, set[str]]:
    """Third-party top-level module -> the files (relative to the repository) that need it."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    local = packages | {p.stem for p in TESTS.rglob("*.py")}
    queue = sorted(TESTS.rglob("*.py"))
    seen_packages: set[str] = set()
    needed: dict[str, set[str]] = {}
    while queue:
        path = queue.pop()
        for name in _required_modules(ast.parse(path.read_text(), str(path))):
            if name in packages and name not in seen_packages:
                seen_packages.add(name)
                queue += sorted((ROOT / name).rglob("*.py"))
            elif name not in local and name not in sys.stdlib_module_names:
                needed.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return needed


def declared_for_tests(pyproject: dict) -> set[str]:
    """The distributions `dependencies` and the `test` extra declare, and those the README's
    test command installs on its own with `pip install --no-deps NAME==VERSION`."""
    project = pyproject["project"]
    command = subprocess.run([str(ROOT / ".ci" / "quickstart-test-command"), str(ROOT / "README.md")],
                             capture_output=True, text=True, check=True).stdout
    no_deps = re.findall(r"pip install --no-deps ([A-Za-z0-9._-]+)==", command)
    return _requirement_names(project["dependencies"] + project["optional-dependencies"]["test"] + no_deps)


def undeclared(needed: dict[str, set[str]], declared: set[str]) -> dict[str, set[str]]:
    return {m: files for m, files in needed.items()
            if _normalize(DISTRIBUTION_OF.get(m, m)) not in declared}


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_every_module_the_tests_import_is_declared():
    needed = scan_test_imports()
    assert {"torch", "msgspec", "pytest"} <= set(needed)  # the scan reaches tests and packages
    missing = undeclared(needed, declared_for_tests(_pyproject()))
    assert not missing, "imported by the tests but not declared in pyproject.toml's dependencies " \
        "or 'test' extra: " + "; ".join(f"{m} (in {', '.join(sorted(f))})" for m, f in sorted(missing.items()))


def test_the_check_reports_numpy_when_the_test_extra_lacks_it():
    """The pyproject before numpy was declared: the scan names numpy and a file needing it."""
    declared = declared_for_tests(_pyproject()) - {"numpy"}
    missing = undeclared(scan_test_imports(), declared)
    assert set(missing) == {"numpy"}
    assert "tests/support/equality.py" in missing["numpy"]  # .numpy() without an import


def _module_level_imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(top-level names of absolute imports, names of sibling modules imported relatively) that
    run when the module is imported: function bodies and optional imports left out."""
    absolute: set[str] = set()
    relative: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Try) and _handles_import_error(node):
            return
        if isinstance(node, ast.Import):
            absolute.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            absolute.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            relative.update([node.module] if node.module else [a.name for a in node.names])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return absolute, relative


# imported only by their users, never by `import replay` (tests/integrations/test_trl_imports.py)
OPT_IN = ROOT / "replay" / "integrations"


def scan_demo_imports() -> set[str]:
    """Third-party top-level modules that `journal-demo`'s default run imports: the module-level
    imports of examples/chaos.py and examples/trainer.py (the child it runs), of the example
    modules they import, and of every module of the library packages they import (but
    `replay.integrations`, which the demo never imports)."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    queue = [ROOT / "examples" / "chaos.py", ROOT / "examples" / "trainer.py"]
    seen: set[Path] = set()
    needed: set[str] = set()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        absolute, relative = _module_level_imports(ast.parse(path.read_text(), str(path)))
        queue += [path.parent / f"{name}.py" for name in relative if (path.parent / f"{name}.py").is_file()]
        for name in absolute:
            if name in packages:
                queue += [p for p in sorted((ROOT / name).rglob("*.py")) if OPT_IN not in p.parents]
            elif name not in sys.stdlib_module_names:
                needed.add(name)
    return needed


def test_the_demo_extra_declares_what_the_default_demo_imports():
    """The quick start's main job installs the `demo` extra only: everything `journal-demo`
    imports without --ray or --replica is in `dependencies` or `demo`, and numpy is there
    (torch warns `Failed to initialize NumPy` without it)."""
    needed = scan_demo_imports()
    assert {"torch", "torchdata", "msgspec"} <= needed   # the scan reaches the trainer and the library
    assert not needed & {"ray", "obstore", "matplotlib"}, "optional extras imported by the default demo"
    project = _pyproject()["project"]
    declared = _requirement_names(project["dependencies"] + project["optional-dependencies"]["demo"])
    assert not undeclared({m: set() for m in needed}, declared)
    assert "numpy" in declared
