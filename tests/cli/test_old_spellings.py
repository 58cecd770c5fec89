"""One spelling per concept on every command (:data:`trajstore.cli.commands.OLD_SPELLINGS`): each
old spelling still runs the command exactly as its new spelling does, with one ``warning:`` line
on stderr naming the new one; the new spelling runs without a warning."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers.stores import write_synthetic_store
from trajstore.cli.commands import OLD_SPELLINGS
from trajstore.cli.main import app

runner = CliRunner()
OPENHANDS_LOG = "openhands/v0_saved_trajectory/basic.json"


class _Called(Exception):
    """Raised by a stand-in for the library function a command calls, once it saw its arguments."""


def _capture(monkeypatch: pytest.MonkeyPatch, target: str) -> list[Any]:
    """Replace `target` (``module.function``) by a stand-in that records its arguments and stops the
    command there; returns the list the arguments of each call are appended to."""
    calls: list[Any] = []

    def stand_in(*args: Any, **kwargs: Any) -> None:
        calls.append((args, kwargs))
        raise _Called

    monkeypatch.setattr(target, stand_in)
    return calls


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def _both_ways(calls: list[Any], new_args: list[str], old_args: list[str]) -> tuple[Any, list[str]]:
    """Run the command with the new spelling, then the old: the captured library function (`calls`)
    got the same config both times (returned), and only the old spelling warned (its lines returned)."""
    new = runner.invoke(app, new_args)
    old = runner.invoke(app, old_args)
    assert len(calls) == 2, (new.output, old.output)
    assert calls[0][0][0] == calls[1][0][0]
    assert _warnings(new.stderr) == []
    return calls[0][0][0], _warnings(old.stderr)


# --- the store: the first argument STORE, was --store on ingest, proxy and demo ---

def test_ingest_store_first_argument_and_old_store_option(tmp_path: Path, fix: Path) -> None:
    log = str(fix / OPENHANDS_LOG)
    new = runner.invoke(app, ["ingest", str(tmp_path / "new"), log, "--format", "json"])
    assert new.exit_code == 0, new.output
    assert _warnings(new.stderr) == []
    assert json.loads(new.stdout)["trajectories_written"] == 1
    # the old form: every positional argument is an input path when --store is given, wherever it is
    old = runner.invoke(app, ["ingest", log, "--store", str(tmp_path / "old"), "--format", "json"])
    assert old.exit_code == 0, old.output
    assert _warnings(old.stderr) == [f"warning: --store is now the first argument STORE: traj ingest "
                                     f"{tmp_path / 'old'} ... (the old spelling will be removed)"]
    assert json.loads(old.stdout) == json.loads(new.stdout)
    eq = runner.invoke(app, ["ingest", f"--store={tmp_path / 'eq'}", log, log, "--format", "json"])
    assert eq.exit_code == 0, eq.output
    assert json.loads(eq.stdout)["trajectories_written"] == 1 and len(_warnings(eq.stderr)) == 1


def test_ingest_old_store_option_refuses_two_stores_and_a_missing_value(tmp_path: Path, fix: Path) -> None:
    log = str(fix / OPENHANDS_LOG)
    res = runner.invoke(app, ["ingest", log, "--store", str(tmp_path / "a"), "--store", str(tmp_path / "b")])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1] == (f"error: option --store given twice with different values (--store "
                                           f"{tmp_path / 'a'}, --store {tmp_path / 'b'}): give it once")
    res = runner.invoke(app, ["ingest", log, "--store"])
    assert res.exit_code == 2 and res.stderr.splitlines()[-1] == "error: option --store requires an argument"
    # the same store twice is harmless, as for any option
    res = runner.invoke(app, ["ingest", log, "--store", str(tmp_path / "a"), "--store", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "b").exists()


def test_ingest_logs_given_without_a_store_write_nothing(tmp_path: Path, fix: Path) -> None:
    # the old habit without --store: the first path is taken as the store; a folder of logs is not
    # one, so nothing is written into it, and a single path lacks the input
    res = runner.invoke(app, ["ingest", str(fix / "swe-agent")])
    assert res.exit_code == 2 and res.stderr == "error: missing argument PATH\n"
    res = runner.invoke(app, ["ingest", str(fix / "swe-agent"), str(fix / OPENHANDS_LOG)])
    assert res.exit_code == 1 and "is not a trajstore store" in res.stderr and "nothing was written" in res.stderr


def test_proxy_store_first_argument_and_old_store_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    calls = _capture(monkeypatch, "trajstore.proxy.app.run_proxy")
    rest = ["--upstream", "http://127.0.0.1:9", "--port", "0", "--run", "r1"]
    cfg, warned = _both_ways(calls, ["proxy", str(tmp_path / "s"), *rest],
                             ["proxy", *rest[:2], "--store", str(tmp_path / "s"), *rest[2:]])
    assert cfg.store == str(tmp_path / "s")
    assert warned == [
        f"warning: --store is now the first argument STORE: traj proxy {tmp_path / 's'} ... "
        "(the old spelling will be removed)"]


def _fake_demo(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    pytest.importorskip("torch")
    return _capture(monkeypatch, "trajstore.trainer.apps.demo.run_demo")


def test_demo_store_first_argument_and_old_store_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_demo(monkeypatch)
    cfg, warned = _both_ways(calls, ["demo", str(tmp_path / "d"), "--model", "tiny-llama", "--run", "r1"],
                             ["demo", "--model", "tiny-llama", "--store", str(tmp_path / "d"), "--run", "r1"])
    assert cfg.store == str(tmp_path / "d")
    assert warned == [f"warning: --store is now the first argument STORE: traj demo {tmp_path / 'd'} "
                      "... (the old spelling will be removed)"]


def test_demo_store_keeps_its_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trajstore.trainer.apps.demo import DEFAULT_STORE

    calls = _fake_demo(monkeypatch)
    monkeypatch.chdir(tmp_path)
    runner.invoke(app, ["demo", "--model", "tiny-llama", "--run", "r1"])
    assert len(calls) == 1 and calls[0][0][0].store == DEFAULT_STORE


# --- the training run: --run, was --run-id (train, demo), --follow-run (proxy), --consumed-by (gc) ---

def test_train_run_id_is_now_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    write_synthetic_store(tmp_path / "s", 2)
    calls = _capture(monkeypatch, "trajstore.trainer.loop.train.train")
    cfg, warned = _both_ways(calls, ["train", str(tmp_path / "s"), "--model", "tiny-llama", "--run", "r1"],
                             ["train", str(tmp_path / "s"), "--model", "tiny-llama", "--run-id", "r1"])
    assert cfg.run.run_id == "r1"
    assert warned == ["warning: --run-id is now --run (the old spelling will be removed)"]


def test_demo_run_id_is_now_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_demo(monkeypatch)
    cfg, warned = _both_ways(calls, ["demo", str(tmp_path / "d"), "--model", "tiny-llama", "--run", "r1"],
                             ["demo", str(tmp_path / "d"), "--model", "tiny-llama", "--run-id=r1"])
    assert cfg.run_id == "r1"
    assert warned == ["warning: --run-id is now --run (the old spelling will be removed)"]


# (and on traj proxy: seconds between checks for something new, --poll-interval as on traj train,
# was --poll)
@pytest.mark.parametrize(("old", "new", "value", "field"), [("--follow-run", "--run", "r1", "follow_run"),
                                                            ("--poll", "--poll-interval", "0.25", "poll_s")])
def test_proxy_renamed_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, value: str,
                               field: str) -> None:
    pytest.importorskip("fastapi")
    calls = _capture(monkeypatch, "trajstore.proxy.app.run_proxy")
    rest = [str(tmp_path / "s"), "--upstream", "http://127.0.0.1:9", "--port", "0"]
    cfg, warned = _both_ways(calls, ["proxy", *rest, new, value], ["proxy", *rest, old, value])
    assert str(getattr(cfg, field)) == value
    assert warned == [f"warning: {old} is now {new} (the old spelling will be removed)"]


def test_gc_consumed_by_is_now_run(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path / "s", 2)
    new = runner.invoke(app, ["gc", str(tmp_path / "s"), "--run", "r1", "--format", "json"])
    old = runner.invoke(app, ["gc", str(tmp_path / "s"), "--consumed-by", "r1", "--format", "json"])
    assert new.exit_code == 0, new.output
    assert old.exit_code == 0 and old.stdout == new.stdout, old.output
    assert _warnings(new.stderr) == []
    assert _warnings(old.stderr) == ["warning: --consumed-by is now --run (the old spelling will be removed)"]


# --- a preview: --dry-run, was --check (redact) ---

@pytest.mark.parametrize(("old_flag", "new_flag", "called"), [("--check", "--dry-run", "find_secrets"),
                                                               ("--no-check", "--no-dry-run", "redact_store")])
def test_redact_check_is_now_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_flag: str, new_flag: str,
                                     called: str) -> None:
    write_synthetic_store(tmp_path / "s", 2)
    calls = {name: _capture(monkeypatch, f"trajstore.cli.redact.{name}") for name in ("find_secrets", "redact_store")}
    new = runner.invoke(app, ["redact", str(tmp_path / "s"), new_flag])
    old = runner.invoke(app, ["redact", str(tmp_path / "s"), old_flag])
    assert len(calls[called]) == 2 and sum(map(len, calls.values())) == 2, (new.output, old.output)
    assert calls[called][0][1].keys() == calls[called][1][1].keys()
    assert calls[called][0][1]["config"] == calls[called][1][1]["config"]
    assert _warnings(new.stderr) == []
    assert _warnings(old.stderr) == [f"warning: {old_flag} is now {new_flag} (the old spelling will be removed)"]


# --- the output format: --format, was --output (ingest) ---

def test_ingest_output_is_now_format(tmp_path: Path, fix: Path) -> None:
    log = str(fix / OPENHANDS_LOG)
    new = runner.invoke(app, ["ingest", str(tmp_path / "new"), log, "--format", "csv"])
    old = runner.invoke(app, ["ingest", str(tmp_path / "old"), log, "--output", "csv"])
    assert new.exit_code == 0, new.output
    assert old.exit_code == 0 and old.stdout == new.stdout and old.stdout.startswith("metric,value\n"), old.output
    assert _warnings(new.stderr) == []
    assert _warnings(old.stderr) == ["warning: --output is now --format (the old spelling will be removed)"]
    # given with --format: the same value is accepted, another is one usage error
    res = runner.invoke(app, ["ingest", str(tmp_path / "new"), log, "--format", "json", "--output", "csv"])
    assert res.exit_code == 2 and "option --format given twice with different values" in res.stderr


# --- where the result is written: --output (traj sql, traj export), was --out (export) ---

def test_export_out_is_now_output(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path / "s", 2)
    args = ["export", str(tmp_path / "s"), "--to", "slime", "--allow-secrets", "--format", "json"]
    new = runner.invoke(app, [*args, "--output", str(tmp_path / "new")])
    old = runner.invoke(app, [*args, "--out", str(tmp_path / "old")])
    short = runner.invoke(app, [*args, "-o", str(tmp_path / "short")])
    assert new.exit_code == 0, new.output
    assert old.exit_code == 0 and short.exit_code == 0, (old.output, short.output)
    summary = [json.loads(r.stdout) for r in (new, old, short)]
    assert [d.pop("out") for d in summary] == [str(tmp_path / n) for n in ("new", "old", "short")]
    assert summary[0] == summary[1] == summary[2] and summary[0]["exported"] == 2
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == sorted(p.name for p in (tmp_path / "new").iterdir())
    assert _warnings(new.stderr) == [] and _warnings(short.stderr) == []
    assert _warnings(old.stderr) == ["warning: --out is now --output (the old spelling will be removed)"]


# --- the variable holding the token clients must send: --client-token-env (proxy, view), was
# --token-env (view) ---

def test_view_token_env_is_now_client_token_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("jinja2")
    write_synthetic_store(tmp_path / "s", 2)
    monkeypatch.setenv("MY_VIEW_TOKEN", "abc")
    calls = _capture(monkeypatch, "trajstore.view.app.run_view")
    cfg, warned = _both_ways(calls, ["view", str(tmp_path / "s"), "--client-token-env", "MY_VIEW_TOKEN"],
                             ["view", str(tmp_path / "s"), "--token-env", "MY_VIEW_TOKEN"])
    assert cfg.token == "abc"
    assert warned == ["warning: --token-env is now --client-token-env (the old spelling will be "
                      "removed)"]


def test_every_old_spelling_is_tested_here_and_hidden_from_help() -> None:
    source = Path(__file__).read_text()
    for command, renamed in OLD_SPELLINGS.items():
        res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        for old, new in renamed.items():
            assert f'"{old}"' in source, (command, old)  # each has a test above
            assert not re.search(rf"(?<![\w-]){old}(?![\w-])", res.output), (command, old)
            assert new in res.output, (command, new)
