"""The package architecture, checked on the source (no GPU needed).

Imports point down: experiments > accuracy, modeling > gpu.

* layers: ``gpu`` imports none of ``modeling``, ``accuracy``, ``experiments``; ``modeling`` and
  ``accuracy`` do not import ``experiments``. Relative imports are resolved first, imports inside
  functions count, and so do the ``"module:Class"`` targets gpu loads lazily (``register_ops``).
* module-level imports: the library (gpu, modeling, accuracy) has no import statement below
  module level, and only ``gpu/backend/interface.py`` imports by name at run time
  (``importlib.import_module``, for CuPy and the code written for it).
* no database: no library module imports ``sqlite3``; the results database is the lab's.
* size: no source file of the four packages, and no test, is longer than 400 lines.

Every finding is reported as ``path:line: rule: statement``. The checker is tested on synthetic
sources that break each rule, so these tests can fail.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpu", "accuracy", "modeling", "experiments")
LIBRARY = ("gpu", "accuracy", "modeling")
#: What each package may not import (its own layer and those above it).
FORBIDDEN = {"gpu": ("modeling", "accuracy", "experiments"), "modeling": ("experiments",),
             "accuracy": ("experiments",), "experiments": ()}
DYNAMIC_IMPORTER = "gpu/backend/interface.py"
MAX_LINES = 400
LAZY_TARGET = re.compile(r"([A-Za-z_]\w*(?:\.\w+)*):[A-Za-z_]\w*")

LAYERS = "layers (imports point down: experiments > accuracy, modeling > gpu)"
LOCAL = "import below module level (the library imports at the top of a module)"
DYNAMIC = f"import by name at run time (only {DYNAMIC_IMPORTER} loads modules lazily)"
SQLITE = "sqlite3 in library code (only experiments opens the results database)"
LENGTH = f"longer than {MAX_LINES} lines (split the file)"


def module_of(path: str) -> tuple[str, str]:
    """(module, package) of a repository-relative path: ``gpu/strassen/api.py`` -> ``gpu.strassen.api``,
    ``gpu.strassen``; an ``__init__.py`` is its own package."""
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def resolve(package: str, level: int, module: str | None) -> str:
    """The absolute name of ``from <level dots><module> import ...`` in ``package``. A relative import
    past the top-level package is resolved from the repository root (``from ..experiments`` in
    ``gpu/profile.py`` is ``experiments``), so it cannot hide an import across layers."""
    parts = package.split(".") if package else []
    base = parts[:max(0, len(parts) - (level - 1))] if level else []
    return ".".join([*base, *([module] if module else [])])


def imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """Every module a statement may import (for ``from x import y``: x, and x.y in case y is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = resolve(package, node.level, node.module)
    return [base, *(f"{base}.{alias.name}" if base else alias.name for alias in node.names)]


def _top(name: str) -> str:
    return name.partition(".")[0]


def _is_dynamic_import(node: ast.Call) -> bool:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def check_source(source: str, path: str) -> list[str]:
    """The rule breaches of one file, as ``path:line: rule: statement``."""
    tree = ast.parse(source, filename=path)
    package_name = Path(path).parts[0]
    _, package = module_of(path)
    forbidden = FORBIDDEN.get(package_name, ())
    library = package_name in LIBRARY
    found = []

    def report(node: ast.AST, rule: str) -> None:
        text = ast.get_source_segment(source, node) or ast.unparse(node)
        found.append(f"{path}:{node.lineno}: {rule}: {' '.join(text.split())}")

    def visit(node: ast.AST, nested: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            tops = [_top(n) for n in imported_names(node, package) if n]
            crossed = [t for t in tops if t in forbidden]
            if crossed:
                report(node, f"{LAYERS}: {package_name} imports {crossed[0]}")
            if library and nested:
                report(node, LOCAL)
            if library and "sqlite3" in tops:
                report(node, SQLITE)
        elif isinstance(node, ast.Call) and library and _is_dynamic_import(node) and path != DYNAMIC_IMPORTER:
            report(node, DYNAMIC)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and forbidden:
            match = LAZY_TARGET.fullmatch(node.value)
            if match and _top(match[1]) in forbidden:
                report(node, f"{LAYERS}: {package_name} loads {match[1]} lazily")
        inner = nested or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    lines = len(source.splitlines())
    if lines > MAX_LINES:
        found.append(f"{path}:{lines}: {LENGTH}: {lines} lines")
    return found


def sources(top: str) -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def breaches(top: str) -> list[str]:
    return [f for path in sources(top) for f in check_source((ROOT / path).read_text(), path)]


# --- the repository --------------------------------------------------------------------------------

def test_every_package_is_checked():
    for top in PACKAGES:
        assert f"{top}/__init__.py" in sources(top), top
    assert DYNAMIC_IMPORTER in sources("gpu") and "importlib.import_module" in (ROOT / DYNAMIC_IMPORTER).read_text()


@pytest.mark.parametrize("top", [*LIBRARY, "experiments", "tests"])
def test_package_follows_the_architecture(top):
    found = breaches(top)
    assert not found, f"{len(found)} breach(es) of the architecture in {top}/:\n" + "\n".join(found)


def _fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter importing this checkout, and return the JSON it prints."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_interpreter_knows_the_ozaki_methods_without_the_lab():
    out = _fresh("import json, sys; import accuracy.methods as m; method = m.get_method('ozaki-int8-8'); "
                 "print(json.dumps({'name': method.name, 'file': m.__file__, "
                 "'loaded': sorted({k.partition('.')[0] for k in sys.modules})}))")
    assert out["name"] == "ozaki-int8-8"
    assert Path(out["file"]).resolve() == ROOT / "accuracy" / "methods.py", "not this checkout's accuracy"
    assert "experiments" not in out["loaded"]


def test_the_library_imports_nothing_above_its_layer_at_run_time():
    """Every library module imported (CuPy's own skipped where there is no CuPy): gpu alone loads
    no higher package, and the whole library loads no experiments."""
    out = _fresh("""
import importlib, json, pkgutil, sys
def tops():
    return sorted({k.partition('.')[0] for k in sys.modules})
seen = {}
for top in ('gpu', 'modeling', 'accuracy'):
    pkg = importlib.import_module(top)
    for info in pkgutil.walk_packages(pkg.__path__, top + '.'):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name != 'cupy':
                raise
    seen[top] = tops()
print(json.dumps(seen))
""")
    assert not {"modeling", "accuracy", "experiments"} & set(out["gpu"]), out["gpu"]
    assert "experiments" not in out["accuracy"]


# --- the checker catches each breach ---------------------------------------------------------------

@pytest.mark.parametrize("path,source,line,rule", [
    ("gpu/ozaki/plan.py", "import numpy\nimport modeling.fits\n", 2, "gpu imports modeling"),
    ("gpu/profile.py", "from accuracy import methods\n", 1, "gpu imports accuracy"),
    ("gpu/profile.py", "from ..experiments import cli\n", 1, "gpu imports experiments"),
    ("gpu/strassen/api.py", "from ...experiments.core import lab\n", 1, "gpu imports experiments"),
    ("gpu/strassen/api.py", "from ... import modeling\n", 1, "gpu imports modeling"),
    ("gpu/strassen/api.py", "x = 1\n\ndef f():\n    import experiments.cli as c\n", 4, "gpu imports experiments"),
    ("gpu/ozaki/ops.py", 'register_ops("ozaki", "cupy", "experiments.kernels:CudaOps")\n', 1,
     "gpu loads experiments.kernels lazily"),
    ("modeling/profile.py", "from experiments.core.database import ResultsDB\n", 1, "modeling imports experiments"),
    ("accuracy/audit.py", "from .. import experiments\n", 1, "accuracy imports experiments"),
    ("modeling/fits.py", "def f():\n    import numpy as np\n    return np\n", 2, LOCAL),
    ("accuracy/methods.py", "class M:\n    from gpu import ozaki\n", 2, LOCAL),
    ("gpu/strassen/auto.py", "import importlib\nm = importlib.import_module('gpu.profile')\n", 2, DYNAMIC),
    ("modeling/profile.py", "def f(name):\n    return __import__(name)\n", 2, DYNAMIC),
    ("accuracy/reference.py", "from importlib import import_module\ngmpy2 = import_module('gmpy2')\n", 2, DYNAMIC),
    ("gpu/profile.py", "import sqlite3\n", 1, SQLITE),
    ("modeling/auto.py", "from sqlite3 import connect\n", 1, SQLITE),
    ("accuracy/audit.py", "x = 1\n" * (MAX_LINES + 1), MAX_LINES + 1, LENGTH),
    ("tests/test_big.py", "\n".join(["def test(): pass"] * (MAX_LINES + 5)), MAX_LINES + 5, LENGTH),
])
def test_the_checker_reports_each_rule_with_file_and_line(path, source, line, rule):
    found = check_source(source, path)
    assert any(f.startswith(f"{path}:{line}: ") and rule in f for f in found), found


def test_the_checker_names_the_statement():
    found = check_source("import numpy\n\n\ndef load():\n    from ..experiments   import cli\n", "gpu/profile.py")
    assert found == [f"gpu/profile.py:5: {LAYERS}: gpu imports experiments: from ..experiments import cli",
                     f"gpu/profile.py:5: {LOCAL}: from ..experiments import cli"]


@pytest.mark.parametrize("path,source", [
    ("gpu/strassen/api.py", "from ..backend import get_backend\nfrom .auto import auto_level\nimport numpy\n"),
    ("gpu/strassen/api.py", "from ..experiments import x\n"),          # gpu.experiments: still inside gpu
    ("gpu/ozaki/ops.py", 'register_ops("ozaki", "cupy", "gpu.ozaki.kernels:CudaOps")\nt = "12:30"\n'),
    ("accuracy/reference.py", "try:\n    import gmpy2\nexcept ImportError:\n    gmpy2 = None\n"),
    ("modeling/recursive.py", "from gpu.strassen.costs import level_counts\nfrom accuracy import metrics\n"),
    (DYNAMIC_IMPORTER, "import importlib\n\ndef load(t):\n    return importlib.import_module(t)\n"),
    ("experiments/core/registry.py", "import importlib\n\ndef load():\n    import sqlite3\n"
                                     "    importlib.import_module('experiments.strassen')\n"),
    ("tests/test_x.py", "def test():\n    import experiments.cli\n    import sqlite3\n"),
])
def test_the_checker_allows_what_the_architecture_allows(path, source):
    assert check_source(source, path) == []


def test_relative_imports_resolve_like_python():
    assert module_of("gpu/strassen/api.py") == ("gpu.strassen.api", "gpu.strassen")
    assert module_of("gpu/strassen/__init__.py") == ("gpu.strassen", "gpu.strassen")
    assert resolve("gpu.strassen", 1, "auto") == "gpu.strassen.auto"
    assert resolve("gpu.strassen", 2, "backend") == "gpu.backend"
    assert resolve("gpu.strassen", 2, None) == "gpu"
    assert resolve("gpu", 2, "experiments") == "experiments"
    assert resolve("gpu.strassen", 0, "numpy") == "numpy"
