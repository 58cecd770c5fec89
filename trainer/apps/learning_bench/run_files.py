"""The files of a ``traj bench learning`` run directory, read with errors that name them:
``config.json``, ``machine.json``, ``summary.json`` and the per-run result files
``results/<run>.json`` (or ``.json.gz``, as committed under ``bench/learning_results/``), and
whether a directory holds files committed to git (which the benchmark never writes over).

A result file is checked for the shape the analysis reads (:class:`RunResult` for a training
run, :class:`QualityResult` for the advantage-quality study) when it is read, so a truncated,
foreign or hand-edited file is refused in one line naming it and the field, never met later as a
traceback in the statistics."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trajstore.trainer.apps.learning_bench.arms import BenchError
from trajstore.trainer.apps.learning_bench.presets import SuiteConfig

RESULT_SUFFIXES = (".json", ".json.gz")
"""A result file is ``results/<run name><suffix>``."""


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResultSpec(_Open):
    """The fields of a result's ``spec`` that name the run (the rest is kept as written)."""

    task: str
    arm: str
    seed: int


class Evaluation(_Open):
    """One evaluation of a run: its policy step and mean reward (in [0, 1])."""

    step: int
    reward: float


class RunResult(_Open):
    """A training run's result file, as far as the analysis reads it."""

    spec: ResultSpec
    history: list[dict[str, Any]]
    evals: list[Evaluation] = Field(min_length=1)
    log_ratio_hist: dict[str, Any] = Field(default_factory=dict)
    band: dict[str, Any] = Field(default_factory=dict)
    staleness_tokens: dict[str, Any] = Field(default_factory=dict)
    seconds: float
    cpu_seconds: float = 0.0


class QualityResult(_Open):
    """An advantage-quality study's result file (``quality-s<seed>``)."""

    checkpoints: list[dict[str, Any]]
    tokens: int
    seed: int


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "the file"
    return f"{where}: {err['msg'].lower()}"


def run_name(path: Path) -> str | None:
    """The run name of a result file's path, or None when the name is not one."""
    for suffix in sorted(RESULT_SUFFIXES, key=len, reverse=True):
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[: -len(suffix)]
    return None


def read_result(path: Path) -> dict[str, Any]:
    """One result file, checked (module docstring), as the dict it holds.

    Raises:
        BenchError: it cannot be read (a truncated or not-gzip ``.gz``, not UTF-8, not JSON) or
            does not have a result's fields; the message names the file and the reason.
    """
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        value = json.loads(data)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as e:
        reason = "truncated gzip data" if isinstance(e, EOFError) else str(e) or type(e).__name__
        raise BenchError(f"{path}: not a readable result file ({reason})") from None
    model = QualityResult if (run_name(path) or "").startswith("quality-") else RunResult
    try:
        model.model_validate(value)
    except ValidationError as e:
        raise BenchError(f"{path}: not a result file of this benchmark ({_first_error(e)})") from None
    return value


def load_results(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Every result file of a run directory, by run name (files of other names are ignored).

    Raises:
        BenchError: a result file that :func:`read_result` refuses, or a run with both a
            ``.json`` and a ``.json.gz`` that differ.
    """
    out: dict[str, Any] = {}
    for p in sorted(Path(run_dir, "results").iterdir()):
        name = run_name(p)
        if name is None:
            continue
        result = read_result(p)
        if name in out and out[name] != result:
            raise BenchError(f"{p}: a second, different result of run {name} ({name}.json and {name}.json.gz)")
        out[name] = result
    return out


def read_json(path: Path) -> Any:
    """A JSON file of a run directory (``machine.json``, ``summary.json``).

    Raises:
        BenchError: naming the file and why it cannot be read.
    """
    try:
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BenchError(f"{path}: not readable JSON ({e})") from None


def read_config(path: Path) -> SuiteConfig:
    """A run directory's ``config.json``.

    Raises:
        BenchError: naming the file and its first problem (not JSON, a missing or wrong field).
    """
    try:
        return SuiteConfig.model_validate_json(path.read_bytes())
    except OSError as e:
        raise BenchError(f"{path}: {e}") from None
    except ValidationError as e:
        raise BenchError(f"{path}: not a benchmark config ({_first_error(e)})") from None


def _inside_git_checkout(d: Path) -> bool:
    return any((p / ".git").exists() for p in (d.resolve(), *d.resolve().parents))


def committed_files(directory: str | os.PathLike[str]) -> list[str]:
    """Files under `directory` that git tracks (paths relative to it); [] when it is not in a git
    work tree. The benchmark never writes over these (a committed result stays as committed).

    Fails safe: when git cannot answer (not installed, or an error other than "not a work
    tree", e.g. a checkout owned by another user) inside a git checkout, the directory counts as
    committed (``["?"]``), so a reanalysis writes under its scratch directory instead."""
    d = Path(directory)
    if not d.is_dir():
        return []
    if shutil.which("git") is None:
        return ["?"] if _inside_git_checkout(d) else []
    proc = subprocess.run(["git", "-C", str(d), "ls-files", "-z", "--", "."], capture_output=True)
    if proc.returncode != 0:
        not_a_tree = b"not a git repository" in proc.stderr
        return [] if not_a_tree and not _inside_git_checkout(d) else ["?"]
    return [n for n in proc.stdout.decode().split("\0") if n]


__all__ = ["RESULT_SUFFIXES", "QualityResult", "RunResult", "committed_files", "load_results", "read_config",
           "read_json", "read_result", "run_name"]
