"""Following one log file through ingest: which trajstore modules a single input passes through
from ``ingest_paths`` to the store write, measured by tracing one call.

    python bench/ingest_path.py [--verbose]

For each of three fixture inputs (an OpenHands V0 event file, a SWE-agent ``.traj``, one NeMo Gym
row) the file is ingested once to warm up (tokenizer, lazy imports), then a second ingest into a
fresh store is traced with ``sys.setprofile``. Printed per input:

- modules: distinct trajstore modules entered (of them, ``trajstore.ingest.*``);
- functions: distinct trajstore functions entered;
- steps: distinct module-to-module calls (caller module -> callee module);
- climbs: of those steps, calls from a module into one on a higher floor of the import graph (a
  floor is one more than the highest floor of what the module imports): a lower layer calling
  back up into a layer built on it, the path stepping back instead of going down.

``--verbose`` also lists the modules in the order first entered and every climb. The numbers
describe the code's structure, not its speed; they change only when the code does.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import trajstore
from trajstore.ingest import ingest_paths

ROOT = Path(trajstore.__file__).resolve().parent
FIX = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures"
INPUTS = {
    "OpenHands V0 event file": "trajectories/openhands/v0_saved_trajectory/basic.json",
    "SWE-agent .traj": "trajectories/swe-agent/v0.x_gpt4_pydicom__pydicom-1458.traj",
    "NeMo Gym row": "trajectories/nemo-gym/hermes_agent_example_math_rollouts.jsonl",  # its first line only
}


def module_of(path: str) -> str | None:
    """The trajstore module a source file is (None for any other file)."""
    p = Path(path)
    if not p.is_absolute() or ROOT not in p.parents or p.suffix != ".py":
        return None
    parts = ("trajstore",) + p.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(module: str) -> set[str]:
    """The trajstore modules `module` imports (anywhere in the file)."""
    rel = Path(*module.split(".")[1:])
    path = ROOT / rel.with_suffix(".py") if (ROOT / rel.with_suffix(".py")).exists() else ROOT / rel / "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out.update(n for n in names if n.startswith("trajstore") and _exists(n))
    out.discard(module)
    return out


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (ROOT / rel.with_suffix(".py")).exists() or (ROOT / rel / "__init__.py").exists()


_FLOORS: dict[str, int] = {}


def floor(module: str, _visiting: set[str] | None = None) -> int:
    """1 + the highest floor of the trajstore modules `module` imports (1: imports none; an import
    that closes a circle is not followed)."""
    if module not in _FLOORS:
        visiting = _visiting if _visiting is not None else set()
        visiting.add(module)
        _FLOORS[module] = 1 + max((floor(d, visiting) for d in _imports(module) if d not in visiting), default=0)
        visiting.discard(module)
    return _FLOORS[module]


def trace(path: str) -> tuple[list[str], set[tuple[str, str]], set[tuple[str, str]]]:
    """(modules in the order first entered, functions entered, module steps) of one traced ingest."""
    order: list[str] = []
    functions: set[tuple[str, str]] = set()
    steps: set[tuple[str, str]] = set()

    def caller_module(frame: FrameType | None) -> str | None:
        while frame is not None:
            m = module_of(frame.f_code.co_filename)
            if m is not None:
                return m
            frame = frame.f_back
        return None

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        m = module_of(frame.f_code.co_filename)
        if m is None:
            return
        if m not in order:
            order.append(m)
        functions.add((m, frame.f_code.co_name))
        c = caller_module(frame.f_back)
        if c is not None and c != m:
            steps.add((c, m))

    with tempfile.TemporaryDirectory() as d:
        ingest_paths([path], f"{d}/warm")
        sys.setprofile(profile)
        try:
            ingest_paths([path], f"{d}/traced")
        finally:
            sys.setprofile(None)
    return order, functions, steps


def inputs(tmp: str) -> Iterator[tuple[str, str]]:
    for name, rel in INPUTS.items():
        path = FIX / rel
        if path.suffix == ".jsonl":
            one = Path(tmp) / path.name
            one.write_text(path.read_text().splitlines()[0] + "\n")
            path = one
        yield name, str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--verbose", action="store_true", help="list the modules in order and every climb")
    args = ap.parse_args()
    if not FIX.is_dir():
        sys.exit(f"needs the fixtures in {FIX} (the shared/ folder beside the checkout)")
    print(f"{'input':26s} {'modules':>8s} {'ingest':>7s} {'functions':>10s} {'steps':>6s} {'climbs':>7s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in inputs(tmp):
            order, functions, steps = trace(path)
            climbs = sorted((a, b) for a, b in steps if floor(b) > floor(a))
            ingest = sum(m.startswith("trajstore.ingest") for m in order)
            print(f"{name:26s} {len(order):8d} {ingest:7d} {len(functions):10d} {len(steps):6d} {len(climbs):7d}")
            if args.verbose:
                print("  path:", " > ".join(m.removeprefix("trajstore.") for m in order))
                for a, b in climbs:
                    print(f"  climb: {a} (floor {floor(a)}) -> {b} (floor {floor(b)})")


if __name__ == "__main__":
    main()
