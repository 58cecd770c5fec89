"""trainer/apps/learning_bench/run_files.py and the reanalysis / resume paths that read a run
directory: a damaged, foreign or incomplete run directory is refused in one line naming the file
and why (exit status 1), before anything is written; a committed directory is never written."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.paths import REPO_ROOT
from trajstore.cli.main import app
from trajstore.trainer.apps.learning_bench import run_files
from trajstore.trainer.apps.learning_bench.run_files import committed_files

COMMITTED = REPO_ROOT / "bench" / "learning_results" / "held-out"
"""A committed run (60 result files of the held-out preset): small, and the checks below fail
before any statistics run."""
OTHER_PRESET = REPO_ROOT / "bench" / "learning_results" / "long"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """An uncommitted copy of the committed held-out run."""
    dst = tmp_path / "run"
    shutil.copytree(COMMITTED, dst)
    return dst


def _result(run: Path, name: str = "chain100-sao-s3") -> Path:
    return run / "results" / f"{name}.json.gz"


def _rewrite(path: Path, edit) -> None:  # noqa: ANN001
    data = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps(edit(data)).encode()))


def _reanalyse(run: Path, scratch: Path, *more: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["bench", "learning", "--reanalyse", str(run), "--scratch", str(scratch), *more])


def _del(key: str):  # noqa: ANN202
    def edit(d: dict) -> dict:
        del d[key]
        return d
    return edit


DAMAGE = {
    "truncated gzip": (lambda p: p.write_bytes(p.read_bytes()[:500]), "truncated gzip data"),
    "not gzip": (lambda p: p.write_bytes(b"hello"), "not a readable result file"),
    "empty": (lambda p: p.write_bytes(b""), "not a readable result file"),
    "bad JSON": (lambda p: p.write_bytes(gzip.compress(b'{"spec": ')), "not a readable result file"),
    "no evals": (lambda p: _rewrite(p, _del("evals")), "evals: field required"),
    "evals not a list": (lambda p: _rewrite(p, lambda d: {**d, "evals": "oops"}), "evals:"),
    "seed not a number": (lambda p: _rewrite(p, lambda d: {**d, "spec": {**d["spec"], "seed": "three"}}),
                          "spec.seed:"),
    "a JSON list": (lambda p: p.write_bytes(gzip.compress(b"[]")), "not a result file of this benchmark"),
    "a number": (lambda p: p.write_bytes(gzip.compress(b"5")), "not a result file of this benchmark"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_result_file_is_named_in_one_line(run: Path, tmp_path: Path, damage: str) -> None:
    spoil, says = DAMAGE[damage]
    spoil(_result(run))
    scratch = tmp_path / "scratch"
    r = _reanalyse(run, scratch)
    assert r.exit_code == 1, r.output
    assert "chain100-sao-s3.json.gz" in r.output and says in r.output, r.output
    assert "Traceback" not in r.output and "Aborted" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (run / "report.md").exists() and not scratch.exists()  # nothing written


def test_a_damaged_result_is_run_again_by_resume_not_kept(run: Path) -> None:
    """``--resume --dry-run`` lists a result it could not analyse under to_run (a real resume
    would otherwise train everything else, then fail in the analysis)."""
    _rewrite(_result(run), _del("evals"))
    _result(run, "chain100-sao-s4").write_bytes(gzip.compress(b"5"))
    r = CliRunner().invoke(app, ["bench", "learning", "--resume", str(run), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["to_run"] == ["chain100-sao-s3", "chain100-sao-s4"]


def test_missing_results_are_refused_not_analysed_as_fewer_seeds(run: Path, tmp_path: Path) -> None:
    _result(run).unlink()
    r = _reanalyse(run, tmp_path / "scratch")
    assert r.exit_code == 1
    assert "1 of the 60 results its config.json plans are missing (chain100-sao-s3)" in r.output
    assert f"--resume {run}" in r.output


def test_results_of_another_config_are_refused(run: Path, tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "bench" / "learning_results" / "power" / "config.json", run / "config.json")
    r = _reanalyse(run, tmp_path / "scratch")
    assert r.exit_code == 1 and "results its config.json plans are missing" in r.output, r.output
    shutil.copy(COMMITTED / "config.json", run / "config.json")
    shutil.copy(REPO_ROOT / "bench" / "learning_results" / "power" / "results" / "chain-sao-s0.json.gz",
                run / "results")
    r = _reanalyse(run, tmp_path / "scratch")
    assert r.exit_code == 1 and "1 result files are of runs its config.json does not plan (chain-sao-s0)" in r.output


@pytest.mark.parametrize("name", ["config.json", "machine.json"])
def test_a_damaged_config_or_machine_file_is_named(run: Path, tmp_path: Path, name: str) -> None:
    (run / name).write_text("{not json")
    r = _reanalyse(run, tmp_path / "scratch")
    assert r.exit_code == 1 and f"{run / name}:" in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1


def test_compare_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    (tmp_path / "empty").mkdir()
    for other, says in ((tmp_path / "empty", f"--compare {tmp_path / 'empty'}: not a run directory"),
                        (OTHER_PRESET, "a run of preset long on task chain, not of held-out on chain100"),
                        (COMMITTED, "the run given to --reanalyse itself")):
        r = _reanalyse(COMMITTED, scratch, "--compare", str(other))
        assert r.exit_code == 1 and says in r.output, r.output
        assert not scratch.exists()
    r = _reanalyse(COMMITTED, scratch, "--compare", str(tmp_path / "nope"))
    assert r.exit_code == 2 and f"invalid option --compare: no such directory: {tmp_path / 'nope'}" in r.output


def test_a_scratch_inside_a_committed_run_is_refused() -> None:
    r = _reanalyse(COMMITTED, COMMITTED / "scratch")
    assert r.exit_code == 1 and "inside the committed run directory" in r.output, r.output
    assert not (COMMITTED / "scratch").exists()


def test_resume_refuses_a_committed_directory_before_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    from trajstore.trainer.apps.learning_bench import resume

    def must_not_run(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a committed run directory was resumed")

    monkeypatch.setattr(resume, "execute", must_not_run)
    before = (COMMITTED / "machine.json").read_bytes()
    r = CliRunner().invoke(app, ["bench", "learning", "--resume", str(COMMITTED)])
    assert r.exit_code == 1 and "holds files committed to git" in r.output, r.output
    assert (COMMITTED / "machine.json").read_bytes() == before and not (COMMITTED / "stores").exists()


def test_committed_check_fails_safe_without_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without git, a directory inside a git checkout counts as committed (a reanalysis then
    writes under its scratch directory); one outside any checkout does not."""
    monkeypatch.setattr(run_files.shutil, "which", lambda _name: None)
    assert committed_files(COMMITTED) == ["?"]
    assert committed_files(tmp_path) == []
