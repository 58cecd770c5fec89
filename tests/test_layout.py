"""The layout's rules stay true: the torch-free core never imports the trainer or torch, every
benchmark entry point starts the way bench/RESULTS.md says to run it, and no test edits sys.path
(shared test code is imported from ``tests.helpers``)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "trajstore"
FORBIDDEN = ("torch", "trajstore.trainer")


def _is_forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module an ``ImportFrom`` names, relative ones resolved against `package`."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def forbidden_imports(source: str, filename: str = "<src>", *, package: str = "trajstore") -> list[tuple[int, str]]:
    """(line, module) of every import of torch or trajstore.trainer anywhere in `source`,
    inside functions and ``TYPE_CHECKING`` blocks included; relative imports are resolved
    against `package` (the package the file is in)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            if _is_forbidden(module):
                found.append((node.lineno, module))
            else:  # from trajstore import trainer / from . import trainer
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names
                          if _is_forbidden(f"{module}.{a.name}")]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _is_forbidden(arg.value):
                found.append((node.lineno, arg.value))
    return found


def _package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parent.parts)


def test_core_never_imports_torch_or_the_trainer() -> None:
    bad = [f"{p.relative_to(ROOT)}:{line}: {mod}"
           for p in sorted(CORE.rglob("*.py"))
           for line, mod in forbidden_imports(p.read_text(), str(p), package=_package_of(p))]
    assert not bad, "trajstore/ must not import torch or trajstore.trainer:\n" + "\n".join(bad)


@pytest.mark.parametrize("src", [
    "import torch",
    "import torch.nn as nn",
    "def f():\n    from torch import nn\n",
    "def f():\n    import trajstore.trainer.loop.train\n",
    "from trajstore.trainer.data import DataCursor",
    "from trajstore import trainer",
    "from . import trainer",
    "from .trainer.loop import train",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trajstore.trainer.loop.config import TrainConfig\n",
    "import importlib\ndef f():\n    return importlib.import_module('trajstore.trainer.loop.train')\n",
])
def test_the_check_catches_each_way_of_importing(src: str) -> None:
    assert forbidden_imports(src)


@pytest.mark.parametrize("src", ["import torchvision_free_name_x", "from trajstore.store import Store",
                                 "from trajstore.trainer_notes import x", "from . import store",
                                 "from .ingest import core"])
def test_the_check_leaves_other_imports_alone(src: str) -> None:
    assert not forbidden_imports(src)


BENCH = sorted((ROOT / "bench").glob("*.py"))


def test_no_bench_script_shadows_a_module_it_could_import() -> None:
    import importlib.util

    def importable(name: str) -> bool:  # test packages (tests/proxy is "proxy" inside pytest) do not count
        spec = importlib.util.find_spec(name)
        return spec is not None and not str(spec.origin or "").startswith(str(ROOT / "tests"))

    shadowing = [p.name for p in BENCH
                 if p.stem in sys.stdlib_module_names or (p.stem != "bench" and importable(p.stem))]
    assert not shadowing, f"bench/ scripts shadow importable modules: {shadowing}"


@pytest.mark.parametrize("script", BENCH, ids=[p.name for p in BENCH])
def test_bench_script_help_runs_as_documented(script: Path) -> None:
    # bench/RESULTS.md runs them as `python bench/<name>.py ...` from the checkout.
    env = {**os.environ, "COLUMNS": "100"}
    r = subprocess.run([sys.executable, str(script.relative_to(ROOT)), "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in (r.stdout + r.stderr).lower()


# Being edited elsewhere when issue 22 moved the tests: it still imports tests/trainer/_train_synth.py
# by path. Remove it from here (and delete _train_synth.py) once it imports tests.helpers.
SYS_PATH_LEFT = {"tests/trainer/test_demo.py"}


def sys_path_edits(source: str, filename: str = "<src>") -> list[int]:
    """Lines of `source` that touch ``sys.path`` (insert, append, assignment, anything)."""
    return [node.lineno for node in ast.walk(ast.parse(source, filename))
            if isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys"]


def test_no_test_edits_sys_path() -> None:
    # issue 22: helpers are imported as tests.helpers.<module> (pyproject's pytest pythonpath)
    found = [f"{rel}:{line}" for p in sorted((ROOT / "tests").rglob("*.py"))
             if (rel := p.relative_to(ROOT).as_posix()) not in SYS_PATH_LEFT
             for line in sys_path_edits(p.read_text(), str(p))]
    assert not found, "tests must import shared code from tests.helpers, not edit sys.path:\n" + "\n".join(found)


@pytest.mark.parametrize("src", ["import sys\nsys.path.insert(0, 'x')", "import sys\nsys.path.append('x')",
                                 "import sys\nsys.path = ['x']", "import sys\ndef f():\n    sys.path[:0] = ['x']\n"])
def test_the_sys_path_check_catches_each_edit(src: str) -> None:
    assert sys_path_edits(src)
