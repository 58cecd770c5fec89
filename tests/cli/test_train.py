"""`traj train`'s options are TrainConfig's fields (issue 22): every field has a flag that --help
lists, every CLI default and choice list is the config's own, and each flag reaches the config
handed to the trainer. The model is walked here independently of cli/config_options.py."""

from __future__ import annotations

import re
import types
import typing
from types import SimpleNamespace
from typing import Any, Literal, Union

import pytest
import typer.main
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from typer.testing import CliRunner

import trajstore as ts
from trajstore.cli.main import app
from trajstore.trainer.loop.config import TrainConfig

runner = CliRunner()
TRAIN = typer.main.get_command(app).commands["train"]
RENAMED = {"name": "--model", "idle_timeout_s": "--idle-timeout", "poll_interval_s": "--poll-interval",
           "storage_options": "--storage-option"}
"""Flags that are not `--` + the field name with `-` for `_` (the README's names, kept)."""


def _inner(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _leaves(model: type[BaseModel] = TrainConfig, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], FieldInfo]]:
    out = []
    for name, field in model.model_fields.items():
        inner = _inner(field.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            out += _leaves(inner, (*prefix, name))
        else:
            out.append(((*prefix, name), field))
    return out


LEAVES = _leaves()
IDS = [".".join(p) for p, _ in LEAVES]
OPTIONS = [(p, f) for p, f in LEAVES if p != ("store",)]  # the store is the STORE argument


def _flag(name: str) -> str:
    return RENAMED.get(name) or "--" + name.replace("_", "-")


def _param(name: str) -> Any:
    """The click parameter of `traj train` for config field `name`."""
    by_flag = {o: p for p in TRAIN.params for o in getattr(p, "opts", [])}
    return by_flag[_flag(name)]


def test_the_walk_sees_every_section():
    sections = {p[0] for p, _ in LEAVES if len(p) > 1}
    assert sections == {"model", "data", "optim", "algo", "run"}
    assert len(LEAVES) > 40


@pytest.mark.parametrize("columns", [80, 200])
def test_help_lists_every_config_field(columns):
    res = runner.invoke(app, ["train", "--help"], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    words = set(res.output.replace("/", " ").split())
    missing = [".".join(p) for p, _ in OPTIONS if _flag(p[-1]) not in words]
    assert not missing, f"no flag in traj train --help for {missing}"
    assert "STORE" in words
    for p, f in OPTIONS:
        if _inner(f.annotation) is bool:
            assert "--no-" + _flag(p[-1])[2:] in words, p


@pytest.mark.parametrize(("path", "field"), OPTIONS, ids=[".".join(p) for p, _ in OPTIONS])
def test_cli_default_and_choices_are_the_configs(path, field):
    param = _param(path[-1])
    if path == ("storage_options",):  # --storage-option KEY=VALUE, repeatable: none given = {}
        assert param.multiple and not param.default and field.get_default(call_default_factory=True) == {}
        return
    if field.is_required():
        assert param.required, path
        return
    assert not param.required, path
    default = field.get_default(call_default_factory=True)
    got = tuple(param.default) if isinstance(default, tuple) and param.default is not None else param.default
    assert got == default, f"{_flag(path[-1])} defaults to {param.default!r}, TrainConfig to {default!r}"
    inner = _inner(field.annotation)
    if typing.get_origin(inner) is Literal:  # the choices are the Literal's, checked before anything runs
        res = runner.invoke(app, ["train", "STORE", "--model", "m", "--run-id", "r", _flag(path[-1]), "bogus"])
        choices = ", ".join(repr(c) for c in typing.get_args(inner))
        assert res.exit_code == 2 and f"'bogus' is not one of {choices}" in res.output, res.output
    if inner is bool:
        assert param.secondary_opts == ["--no-" + _flag(path[-1])[2:]], path
    # the field's description is the help, a `field` named in it read as its flag
    assert field.description, f"{path} has no description"
    assert param.help == re.sub(r"`([a-z_]+)`", lambda m: _flag(m.group(1)), field.description), path


def test_the_store_is_the_argument():
    store = next(p for p in TRAIN.params if p.name == "store")
    assert store.param_type_name == "argument" and store.required


# -- every flag reaches the config ------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    ts.write_trajectories(str(tmp_path / "s"), [])
    return str(tmp_path / "s")


@pytest.fixture
def fake_train(monkeypatch):
    seen = {}

    def train(cfg, *, resume=False):
        seen["cfg"] = cfg
        return SimpleNamespace(iterations=0, steps=0, version=0, history=[], warnings=[])

    monkeypatch.setattr("trajstore.trainer.loop.train.train", train)
    return seen


REQUIRED = ["--model", "tiny-llama", "--run-id", "r"]
OTHER = {"name": "tiny-qwen3-moe", "run_id": "r2", "device": "cpu", "where": "reward > 0", "tokenizer": "tok",
         "critic_trainable_pattern": "^value_head\\.", "keep_versions": 0}
"""A valid value other than the default, where the rule in :func:`_other` would not give one."""


def _other(path: tuple[str, ...], field: FieldInfo) -> tuple[list[str], Any]:
    """Command-line arguments that set the field to a value that is not its default, and that value."""
    name, flag = path[-1], _flag(path[-1])
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    inner = _inner(field.annotation)
    if name in OTHER:
        value = OTHER[name]
    elif inner is bool:
        value = not default
        return [flag if value else "--no-" + flag[2:]], value
    elif typing.get_origin(inner) is Literal:
        value = next(c for c in typing.get_args(inner) if c != default)
    elif typing.get_origin(inner) is tuple:
        value = tuple(x / 2 for x in default)
        return [flag, *map(str, value)], value
    elif inner is int:
        value = (default or 2) + 1
    elif inner is float:
        value = (default or 1.0) / 2
    else:
        raise AssertionError(f"no test value for {path}: {field.annotation}")
    return [flag, str(value)], value


SETTABLE = [(p, f) for p, f in OPTIONS if p != ("storage_options",)]


@pytest.mark.parametrize(("path", "field"), SETTABLE, ids=[".".join(p) for p, _ in SETTABLE])
def test_each_flag_reaches_the_config(store, fake_train, path, field):
    args, value = _other(path, field)
    base = {"name": ["--run-id", "r"], "run_id": ["--model", "tiny-llama"]}.get(path[-1], REQUIRED)
    res = runner.invoke(app, ["train", store, *base, *args], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    got = fake_train["cfg"]
    for key in path:
        got = getattr(got, key)
    assert got == value and got != (None if field.is_required() else field.get_default(call_default_factory=True))


def test_gamma_reaches_the_config(store, fake_train):
    # --gamma had no flag: the discount was 1 whatever the command line said
    res = runner.invoke(app, ["train", store, *REQUIRED, "--gamma", "0.9"])
    assert res.exit_code == 0, res.output
    assert fake_train["cfg"].algo.gamma == 0.9


def test_an_empty_pattern_trains_the_whole_critic(store, fake_train):
    res = runner.invoke(app, ["train", store, *REQUIRED, "--critic-trainable-pattern", ""])
    assert res.exit_code == 0, res.output
    assert fake_train["cfg"].model.critic_trainable_pattern is None


def test_progress_is_off_for_programs(store, fake_train):
    for fmt, flags, progress in [("table", [], True), ("table", ["--no-progress"], False), ("json", [], False),
                                 ("json", ["--progress"], False)]:
        res = runner.invoke(app, ["train", store, *REQUIRED, "--format", fmt, *flags])
        assert res.exit_code == 0, res.output
        assert fake_train["cfg"].run.progress is progress, (fmt, flags)


@pytest.mark.parametrize(("args", "message"), [
    (["--gamma", "0"], "invalid option --gamma: Input should be greater than 0 (got 0.0)"),
    (["--betas", "0.9", "1.5"], "invalid option --betas: AdamW betas must each be in [0, 1), got (0.9, 1.5)"),
    (["--loss-agg", "sum"], "invalid option --loss-agg: 'sum' is not one of 'token-mean', 'seq-mean-token-sum', "
                            "'seq-mean-token-mean'"),
    (["--idle-timeout", "-1"], "invalid option --idle-timeout: Input should be greater than 0 (got -1.0)"),
    (["--betas", "0.9", "0.95", "--betas", "0.9", "0.99"], "option --betas given twice with different values"),
])
def test_bad_values_name_the_flag(store, fake_train, args, message):
    res = runner.invoke(app, ["train", store, *REQUIRED, *args])
    assert res.exit_code == 2 and "cfg" not in fake_train, res.output
    assert res.output.startswith("error: " + message), res.output
