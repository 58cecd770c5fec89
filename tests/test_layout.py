"""The layout's rules stay true: the torch-free core never imports the trainer or torch, every
benchmark entry point starts the way bench/RESULTS.md says to run it, and no test edits sys.path
(shared test code is imported from ``tests.helpers``)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trajstore.store import layout

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
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trajstore.trainer.config import TrainConfig\n",
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


# -- every store path is built by trajstore/store/layout.py -------------------------

LAYOUT_PY = CORE / "store" / "layout.py"
SCANNED = ("trajstore", "trainer", "cli", "bench")
NAMES = {k: v for k, v in vars(layout).items() if k.endswith(("_DIR", "_FILE")) and isinstance(v, str)}
"""The layout's folder and file names by constant name (RUNS_DIR: "runs", VERSION_META_FILE: "meta.json", ...)."""
DIR_WORDS = frozenset(v for k, v in NAMES.items() if k.endswith("_DIR"))
"""Folder names: plain words ("runs", "steps") that mean a store folder only where a path is built."""
FILE_NAMES = frozenset(v for k, v in NAMES.items() if k.endswith("_FILE"))
"""File names ("LATEST", "meta.json", "policy.pt"): spelled anywhere in code, they name the store's file."""
BUILT_BY_FUNCTIONS = frozenset({"RUN_STEPS_DIR", "RUN_CONSUMED_DIR", "RUN_TOKENS_DIR", "RUN_CONFIG_FILE", "RUN_TENSORBOARD_DIR",
                                "CHECKPOINTS_DIR", "LATEST_FILE"})
"""Names a layout function puts in place (run_steps_dir, ..., policy_latest_file): never joined by hand. The
other names may only end a path: a top-level folder is a whole store-relative path (``store.path(TMP_DIR)``,
``root / RUNS_DIR``; ``store.path(RUNS_DIR, run_id)`` is ``run_dir(run_id)``), and a checkpoint or version
folder's file name is joined onto that folder (``store.path(version_dir(run_id, v), VERSION_META_FILE)``)."""
PATH_CALLS = frozenset({
    "path", "url", "join", "joinpath", "Path", "PurePath", "PurePosixPath", "write_bytes", "read_bytes",
    "write_text", "read_text", "write_table", "shard_paths", "list_shards", "iter_dirs", "cat_file", "pipe_file",
    "put_file", "get_file", "open", "exists", "isdir", "isfile", "listdir", "makedirs", "mkdir", "rm", "rm_file",
    "unlink", "rmtree", "du", "ls", "glob", "local_dir_commit", "SummaryWriter", "FileSystemReader",
    "FileSystemWriter"})
"""Calls whose arguments are paths (os.path.join, Store.path / url, fsspec and pathlib methods, ...)."""
PATH_KEYS = frozenset({"subdir", "path", "dir"})
"""Keyword arguments and JSON keys whose value is a path (``subdir=``, the pointers' ``"path"`` / ``"dir"``)."""
_ALT = "|".join(re.escape(n) for n in sorted(set(NAMES.values()), key=len, reverse=True))
_SEGMENT = re.compile(rf"(?<=/)(?:{_ALT})(?=$|/|[^\w.-])|(?:^|(?<=[^\w.-]))(?:{_ALT})(?=/)")
"""A layout name as one ``/``-separated part of a path: ``runs/``, ``/checkpoints/``, ``/LATEST``."""
_JOINED_SEGMENT = re.compile(rf"^/(?:{_ALT})(?=$|/|[^\w.-])|(?:^|(?<=[^\w.-]))(?:{_ALT})/$")
"""In an f-string's text between two values: a layout name joined by ``/`` onto a value (``{root}/runs``,
``runs/{run_id}``). Prose that describes the layout (``runs/<id>/``, ``its trajectories/ folder``) is no path."""


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _layout_name(node: ast.AST) -> str | None:
    """The layout constant `node` refers to (``RUNS_DIR``, ``layout.RUNS_DIR``), else None."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name in NAMES else None


def _is_div(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)


def _div_parts(node: ast.BinOp) -> list[ast.expr]:
    """``a / b / c`` (pathlib) as [a, b, c]."""
    return [*(_div_parts(node.left) if _is_div(node.left) else [node.left]), node.right]


def _joined(parts: list[ast.expr]) -> list[tuple[int, str]]:
    """(line, why) for each layout constant that the parts of one path join by hand (see
    :data:`BUILT_BY_FUNCTIONS`)."""
    out = []
    for i, part in enumerate(parts):
        name = _layout_name(part)
        if name in BUILT_BY_FUNCTIONS or (name is not None and i < len(parts) - 1):
            out.append((part.lineno, f"{name} joined into a longer path by hand"))
    return out


def _path_places(tree: ast.AST) -> tuple[set[int], set[int]]:
    """(ids of string nodes that are no paths: docstrings, mapping keys, subscripts; ids of nodes
    in a place where a path goes: arguments of :data:`PATH_CALLS`, :data:`PATH_KEYS` values,
    operands of pathlib's ``/``)."""
    skip: set[int] = set()
    paths: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        elif isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
            paths.update(id(v) for k, v in zip(node.keys, node.values)
                         if isinstance(k, ast.Constant) and k.value in PATH_KEYS)
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.Call):
            if _callee(node) in PATH_CALLS:
                paths.update(id(a) for a in node.args)
            paths.update(id(k.value) for k in node.keywords if k.arg in PATH_KEYS)
        elif _is_div(node):
            paths.update(id(p) for p in _div_parts(node))
    return skip, paths


def _f_string(node: ast.JoinedStr, in_path: bool) -> list[tuple[int, str]]:
    out = []
    literal = [p.value for p in node.values if isinstance(p, ast.Constant)]
    if any(_JOINED_SEGMENT.search(t) for t in literal):
        out.append((node.lineno, f"store path built in an f-string ({ast.unparse(node)})"))
    if len(node.values) == 2 and isinstance(node.values[1], ast.FormattedValue):
        head, value = node.values[0], node.values[1]
        spec = ast.unparse(value.format_spec) if value.format_spec is not None else ""
        if isinstance(head, ast.Constant) and head.value == "it" and "08d" in spec:
            out.append((node.lineno, f"checkpoint folder name {ast.unparse(node)} built by hand"))
        elif isinstance(head, ast.Constant) and head.value == "v" and not spec and in_path:
            out.append((node.lineno, f"version folder name {ast.unparse(node)} built by hand"))
    values = [p.value for p in node.values if isinstance(p, ast.FormattedValue)]
    if any(_layout_name(v) for v in values) and any("/" in t for t in literal):
        out += _joined(values)
    return out


def hand_built_paths(source: str, filename: str = "<src>") -> list[tuple[int, str]]:
    """(line, why) of every store path `source` spells or joins itself instead of asking
    trajstore.store.layout: a layout name as a string literal (a folder name where a path goes,
    a file name anywhere), a ``/``-separated path through a layout name, a ``v<N>`` (where a path
    goes) or ``it<iteration:08d>`` folder name, a layout constant joined into a longer path
    (``.path(RUNS_DIR, run_id)``, ``f"{RUNS_DIR}/{run_id}"``; names of files in a checkpoint or
    version folder may end a path), a constant redefining a layout name. Docstrings, mapping
    keys and subscripts (metric names such as ``"data/trajectories"``) are no paths."""
    tree = ast.parse(source, filename)
    skip, paths = _path_places(tree)
    chained = {id(n.left) for n in ast.walk(tree) if _is_div(n)}  # inner links of a / b / c
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            v = node.value
            if v in FILE_NAMES or (v in DIR_WORDS and id(node) in paths):
                found.append((node.lineno, f"store name {v!r} spelled by hand"))
            elif id(node) in paths and _SEGMENT.search(v):
                found.append((node.lineno, f"store path {v!r} spelled by hand"))
        elif isinstance(node, ast.JoinedStr) and id(node) not in skip:
            found += _f_string(node, id(node) in paths)
        elif isinstance(node, ast.Call) and _callee(node) in PATH_CALLS:
            found += _joined(node.args)
        elif _is_div(node) and id(node) not in chained:
            found += _joined(_div_parts(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(node.lineno, f"{t.id} redefines a layout name") for t in targets
                      if isinstance(t, ast.Name) and t.id in NAMES]
    return sorted(set(found))


NOT_STORE_PATHS = {
    # (file, text of the finding): why it is no store path
    ("trainer/apps/learning_bench/suite.py", "'config.json'"): "the learning-bench suite's own output folder",
    ("cli/bench.py", "/config.json"): "the learning-bench suite's output folder (traj bench --reanalyse)",
    ("bench/ingest.py", "'trajectories'"): "../shared/fixtures/trajectories, the harness logs' folder",
    ("bench/redact.py", "'trajectories'"): "../shared/fixtures/trajectories, the harness logs' folder",
}


def _hand_built_everywhere() -> list[tuple[str, str]]:
    """(file:line, why) of every finding in the scanned packages, layout.py itself excepted."""
    out = []
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*.py")):
            if p == LAYOUT_PY:
                continue
            rel = p.relative_to(ROOT).as_posix()
            out += [(f"{rel}:{line}", why) for line, why in hand_built_paths(p.read_text(), str(p))
                    if not any(rel == f and text in why for f, text in NOT_STORE_PATHS)]
    return out


def test_no_store_path_is_built_outside_the_layout_module() -> None:
    bad = [f"{where}: {why}" for where, why in _hand_built_everywhere()]
    assert not bad, ("store paths built by hand; use trajstore.store.layout (add a template there if one is "
                     "missing):\n" + "\n".join(bad))


@pytest.mark.parametrize("src", [
    'store.path(RUNS_DIR, run_id, "checkpoints")',  # a layout constant heading a longer path, a folder name
    "store.url(layout.POLICIES_DIR, run_id)",
    'f"{RUNS_DIR}/{run_id}/{RUN_CONSUMED_DIR}"',
    'store.write_bytes(f"{run_dir(run_id)}/{RUN_CONFIG_FILE}", b"")',  # a name a layout function puts in place
    'os.path.join(store, "policies", run_id)',
    'Path(root) / "runs" / run_id',
    "Path(root) / RUNS_DIR / run_id",
    'store.write_table(t, subdir="runs/r/consumed")',
    'x = "LATEST"',  # a file name, wherever it is spelled
    'fh = open(os.path.join(folder, "meta.json"))',
    'msg = f"no {root}/checkpoints/LATEST yet"',
    'msg = f"start the trainer so that runs/{run_id}/config.json exists"',
    'pointer = {"version": v, "path": f"v{v}"}',
    'name = f"it{iteration:08d}"',
    'CHECKPOINTS_DIR = "checkpoints"',  # a second definition
    'store.path(TMP_DIR, "probe")',
])
def test_the_path_check_catches_each_way_of_building_a_store_path(src: str) -> None:
    assert hand_built_paths(src)


@pytest.mark.parametrize("src", [
    "store.path(run_steps_dir(run_id))",
    "store.path(TMP_DIR)",  # a top-level folder is a whole path
    "os.path.join(root, TRAJECTORIES_DIR)",
    "Path(root) / TRAJECTORIES_DIR",
    "store.path(version_dir(run_id, v), VERSION_META_FILE)",  # a file's name onto its folder
    'f"{rel}/{CHECKPOINT_STATE_FILE}"',
    '"""Layout: ``runs/<run_id>/checkpoints/LATEST``."""',  # a docstring
    'm["data/trajectories"] = 4.0',  # a metric name
    'docs = {"data/trajectories": "trajectories trained"}',
    'cols = ["trajectories", "steps", "consumed"]',  # column names
    'line = f"step {step} v{version}"',  # a version shown, not a folder
    'raise ValueError(f"{uri} holds no trajectories/*.parquet, runs/<id>/ or policies/<id>/{hint}")',  # prose
    'out["runs"] = [r for r in runs]',
])
def test_the_path_check_leaves_other_strings_alone(src: str) -> None:
    assert not hand_built_paths(src)


# -- one concept per file ---------------------------------------------------------------------

MAX_MODULE_LINES = 500
"""One concept per file: no module over about 500 lines. An exception needs a reason here."""

LONG_MODULE_REASONS: dict[str, str] = {}
"""Modules allowed over MAX_MODULE_LINES, each with the reason it stays whole."""

SOURCE_FOLDERS = ("trajstore", "trainer", "cli")


def _source_files() -> list[Path]:
    return sorted(p for folder in SOURCE_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_no_module_over_the_line_limit_without_a_reason() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _source_files()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    unexplained = {f: n for f, n in long.items() if f not in LONG_MODULE_REASONS}
    assert not unexplained, f"modules over {MAX_MODULE_LINES} lines (split them, or give a reason): {unexplained}"
    stale = sorted(set(LONG_MODULE_REASONS) - set(long))
    assert not stale, f"LONG_MODULE_REASONS names modules that are no longer long: {stale}"


def test_the_trainer_never_imports_the_cli() -> None:
    """cli/ sits on top: the trainer returns data and the CLI renders it."""
    bad = []
    for p in sorted((ROOT / "trainer").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{p.relative_to(ROOT)}:{node.lineno}: {m}" for m in mods
                    if m == "trajstore.cli" or m.startswith("trajstore.cli.")]
    assert not bad, bad


def sys_path_edits(source: str, filename: str = "<src>") -> list[int]:
    """Lines of `source` that touch ``sys.path`` (insert, append, assignment, anything)."""
    return [node.lineno for node in ast.walk(ast.parse(source, filename))
            if isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys"]


def test_no_test_edits_sys_path() -> None:
    # helpers are imported as tests.helpers.<module> (pyproject's pytest pythonpath)
    found = [f"{rel}:{line}" for p in sorted((ROOT / "tests").rglob("*.py"))
             if (rel := p.relative_to(ROOT).as_posix())
             for line in sys_path_edits(p.read_text(), str(p))]
    assert not found, "tests must import shared code from tests.helpers, not edit sys.path:\n" + "\n".join(found)


@pytest.mark.parametrize("src", ["import sys\nsys.path.insert(0, 'x')", "import sys\nsys.path.append('x')",
                                 "import sys\nsys.path = ['x']", "import sys\ndef f():\n    sys.path[:0] = ['x']\n"])
def test_the_sys_path_check_catches_each_edit(src: str) -> None:
    assert sys_path_edits(src)
