"""trajstore/cli/train.py: `traj train` through typer's CliRunner.

Its options are TrainConfig's fields: every field has a flag that --help
lists, every CLI default and choice list is the config's own, and each flag reaches the config
handed to the trainer. The model is walked here independently of cli/config_options.py.

It prints a JSON summary, and refuses bad options, checkpoints and data before it writes
anything, in one line that names the option or file."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import sys
import types
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, Union

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import typer.main
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.stores import write_split_episode_store, write_synthetic_store
from tests.helpers.training import assert_nothing_written, refusal_config, run_files_digest
from tests.helpers.trajectories import tiny_model_trajectory
from trajstore import write_trajectories
from trajstore.cli.main import app
from trajstore.cli.train import REQUIRED_TO_TRAIN
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.loop.train import train

runner = CliRunner()
TRAIN = typer.main.get_command(app).commands["train"]
RENAMED = {"name": "--model", "idle_timeout_s": "--idle-timeout", "poll_interval_s": "--poll-interval",
           "storage_options": "--storage-option", "run_id": "--run"}
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
        if path[-1] in REQUIRED_TO_TRAIN:  # --replay-step does without them: train_cmd refuses them missing
            assert not param.required and param.default is None, path
            res = runner.invoke(app, ["train", "STORE", *(["--model", "m"] if path[-1] != "name" else []),
                                      *(["--run", "r"] if path[-1] != "run_id" else [])])
            assert res.exit_code == 2 and res.output.strip() == f"error: missing option {_flag(path[-1])}", res.output
        else:
            assert param.required, path
        return
    assert not param.required, path
    default = field.get_default(call_default_factory=True)
    got = tuple(param.default) if isinstance(default, tuple) and param.default is not None else param.default
    assert got == default, f"{_flag(path[-1])} defaults to {param.default!r}, TrainConfig to {default!r}"
    inner = _inner(field.annotation)
    if typing.get_origin(inner) is Literal:  # the choices are the Literal's, checked before anything runs
        res = runner.invoke(app, ["train", "STORE", "--model", "m", "--run", "r", _flag(path[-1]), "bogus"])
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
        return SimpleNamespace(iterations=0, steps=0, version=0, history=[], warnings=[], is_main=True)

    monkeypatch.setattr("trajstore.trainer.loop.train.train", train)
    return seen


REQUIRED = ["--model", "tiny-llama", "--run", "r"]
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
    base = {"name": ["--run", "r"], "run_id": ["--model", "tiny-llama"]}.get(path[-1], REQUIRED)
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


BASE = ["--model", "tiny-llama", "--batch-size", "4", "--micro-batch-size", "2", "--max-seq-len", "512",
        "--critic-warmup-steps", "1"]


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["train", *args], env={"TRAJ_TRACEBACK": ""})


def test_train_prints_a_json_summary(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12)
    r = _run(str(tmp_path), *BASE, "--run", "c1", "--max-steps", "2", "--format", "json",
             "--where", "num_actions = 3")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # notes (memory plan) go to stderr
    assert (out["iterations"], out["steps"], out["policy_version"]) == (3, 2, 2)
    assert out["last_metrics"]["data/trajectories"] == 4
    assert (tmp_path / "policies" / "c1" / "v2" / "meta.json").exists()


def test_train_on_a_store_of_split_episodes(tmp_path: Path) -> None:
    # episode trees: 4 episodes of 3 linked trajectories each (a part, its context-rewrite successor,
    # a sub-agent); every part trained once, each step counts its episodes
    write_split_episode_store(tmp_path, 4)
    r = _run(str(tmp_path), *BASE, "--run", "ep", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    consumed = ts.read_trajectories(str(tmp_path), columns=["trajectory_id"]).num_rows
    rows = pq.read_table(tmp_path / "runs" / "ep" / "consumed").column("trajectory_id").to_pylist()
    assert sorted(rows) == sorted(f"ep{k}.{i}" for k in range(4) for i in range(3)) and consumed == 12
    # batches of 4, a successor kept with its part: ep0.0-2 + ep1.0 + ep1.1 (its successor), then
    # ep1.2 + ep2.0-2, then ep3.0-2 (3 trajectories of 1 episode); the first is the critic warm-up
    assert (out["iterations"], out["steps"]) == (3, 2)
    assert (out["last_metrics"]["data/trajectories"], out["last_metrics"]["data/episodes"]) == (3, 1)


@pytest.mark.parametrize(("setup", "args", "message"), [
    ({"tokenizer": "other/tokenizer"}, [], "field tokenizer is 'other/tokenizer' but the model's tokenizer is 'tiny-llama'"),
    ({"with_logprobs": False}, [], "no rollout log-probs for its actions"),
    ({}, ["--where", "bogus_col > 1"], "is not a valid predicate"),
    ({}, ["--advantage", "magic"], "invalid option --advantage"),
])
def test_refusals_are_one_clear_line(tmp_path: Path, setup: dict, args: list[str], message: str) -> None:
    write_synthetic_store(tmp_path, 2, **setup)
    r = _run(str(tmp_path), *BASE, "--run", "bad", *args)
    assert r.exit_code == (2 if "invalid option" in message else 1), r.output  # 2: a bad option value
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in r.output


@pytest.mark.parametrize(("args", "message"), [
    # The --where connection could read any file and take predicates that reshape its query.
    (["--where", "(SELECT count(*) FROM read_csv('/etc/passwd')) > 0"], "file system operations are disabled"),
    (["--where", "1=1) ORDER BY (1"], "must be one boolean expression"),
    (["--where", "1=1) UNION SELECT 1 --"], "is not a valid predicate"),
    # Bad devices were raw RuntimeError / AttributeError tracebacks from torch.
    (["--device", "tpu"], "invalid option --device: expected auto, cpu, cuda or cuda:N"),
    (["--storage-option", "novalue"], "invalid option --storage-option: expected key=value"),
])
def test_more_refusals_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    write_synthetic_store(tmp_path, 2)
    r = _run(str(tmp_path), *BASE, "--run", "bad", *args)
    assert r.exit_code == (2 if "invalid option" in message else 1), r.output  # README: 2 = bad option value
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], r.output
    assert "Traceback" not in r.output


def test_cuda_device_without_cuda_is_one_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    write_synthetic_store(tmp_path, 2)
    r = _run(str(tmp_path), *BASE, "--run", "bad", "--device", "cuda")
    assert r.exit_code == 1 and "CUDA is not available" in r.output, r.output


def test_missing_store_without_follow_is_an_error(tmp_path: Path) -> None:
    # A mistyped path used to "train" 0 iterations, exit 0 and create a store with policies/ there.
    missing = tmp_path / "no-such-store"
    r = _run(str(missing), *BASE, "--run", "m1", "--max-steps", "1")
    assert r.exit_code == 1 and "no store at" in r.output, r.output
    assert not missing.exists()


BASE_ARGS = ["--model", "tiny-llama", "--batch-size", "2", "--micro-batch-size", "2", "--max-seq-len", "512",
        "--critic-warmup-steps", "0", "--checkpoint-every", "1"]


def _invoke_train(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["train", *args], env={"TRAJ_TRACEBACK": ""})


def _one_error(r, *needles: str, code: int = 1) -> str:  # noqa: ANN001
    """The run failed (exit status ``code``) with exactly one `error:` line containing every needle,
    and no traceback."""
    assert r.exit_code == code, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.output
    for n in needles:
        assert n in errors[0], errors[0]
    assert "Traceback" not in r.output
    return errors[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with run 'r': 2 policy steps, checkpoints after each, 4 trajectories left over."""
    root = tmp_path_factory.mktemp("trained")
    write_synthetic_store(root, 8, per_shard=2)
    assert train(refusal_config(root, max_steps=2)).steps == 2
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst / "s")
    return dst / "s"


def _ckpt(root: Path) -> Path:
    return root / "runs/r/checkpoints" / json.loads((root / "runs/r/checkpoints/LATEST").read_text())["dir"]


class _Foreign:
    pass


def _corrupt(kind: str, root: Path) -> str:
    """Damage the run's checkpoint; return the file the error must name."""
    latest = root / "runs/r/checkpoints/LATEST"
    ck = _ckpt(root)
    if kind == "no-checkpoint":  # records, but the checkpoints are gone
        shutil.rmtree(root / "runs/r/checkpoints")
        return "has training records but no checkpoint"
    if kind == "latest-not-json":
        latest.write_text("{not json")
        return str(latest)
    if kind == "latest-wrong-shape":
        latest.write_text(json.dumps([1, 2]))
        return str(latest)
    if kind == "latest-escapes":
        latest.write_text(json.dumps({"iteration": 2, "dir": "../../.."}))
        return str(latest)
    if kind == "negative-iteration":
        state = json.loads((ck / "state.json").read_text())
        state["iteration"] = -3
        (ck / "state.json").write_text(json.dumps(state))
        return str(ck / "state.json")
    if kind == "policy-garbage":
        (ck / "policy.pt").write_bytes(b"\x00garbage" * 10)
        return str(ck / "policy.pt")
    if kind == "foreign-pickle":
        (ck / "critic.pt").write_bytes(pickle.dumps(_Foreign()))
        return str(ck / "critic.pt")
    if kind == "missing-key":
        sd = torch.load(ck / "policy.pt", weights_only=True)
        sd.pop(sorted(sd)[0])
        torch.save(sd, ck / "policy.pt")
        return str(ck / "policy.pt")
    if kind == "wrong-shape":
        sd = torch.load(ck / "critic.pt", weights_only=True)
        sd["value_head.weight"] = torch.zeros(3, 3)
        torch.save(sd, ck / "critic.pt")
        return str(ck / "critic.pt")
    if kind == "missing-file":
        (ck / "rng.pt").unlink()
        return "has no rng.pt"
    raise AssertionError(kind)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
@pytest.mark.parametrize(("args", "flag"), [
    (["--policy-lr", "inf"], "--policy-lr"),  # exited 0 after publishing an all-NaN policy
    (["--critic-lr", "nan"], "--critic-lr"),
    (["--eps-high", "inf"], "--eps-high"),
    (["--idle-timeout", "-1", "--follow"], "--idle-timeout"),
])
def test_non_finite_or_out_of_range_options_are_refused(tmp_path: Path, args: list[str], flag: str) -> None:
    write_synthetic_store(tmp_path, 2)
    _one_error(_invoke_train(str(tmp_path), *BASE_ARGS, "--run", "x", *args), f"invalid option {flag}",
               code=2)  # bad usage
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_empty_store_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "trajectories").mkdir()
    _one_error(_invoke_train(str(tmp_path), *BASE_ARGS, "--run", "e"), "nothing to train", "0 rows")
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_nothing_trainable_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"n{i}") for i in range(3)]
    trajs = [t.model_copy(update={"reward": None}) for t in trajs]  # no reward: nothing to learn from
    write_trajectories(str(tmp_path), trajs)
    _one_error(_invoke_train(str(tmp_path), *BASE_ARGS, "--run", "n"), "nothing to train", "3 rows: 0 trainable",
               "3 without a reward")
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_a_where_that_selects_nothing_is_refused(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)
    _one_error(_invoke_train(str(tmp_path), *BASE_ARGS, "--run", "w", "--where", "num_actions > 100"),
               "nothing to train", "4 filtered by --where")
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_a_where_that_fails_on_the_data_is_one_line(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)  # source is 'sdk', which DuckDB cannot cast to an integer
    _one_error(_invoke_train(str(tmp_path), *BASE_ARGS, "--run", "w", "--where", "CAST(source AS INTEGER) = 1"),
               "--where", "fails on shard", "Conversion Error")
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
@pytest.mark.parametrize("token", [256, 263])  # "at or above the vocabulary size": 256 is the first bad id
def test_token_id_outside_the_vocabulary_in_a_later_shard_is_refused_before_any_write(tmp_path: Path,
                                                                                     token: int) -> None:
    write_synthetic_store(tmp_path, 8, per_shard=2)  # 4 good shards first
    rng = np.random.default_rng(1)
    bad = tiny_model_trajectory(rng, trajectory_id="bad")
    tokens = np.array(bad.tokens, dtype=np.int32)
    tokens[-1] = token  # the final action token; the CLI's tiny-llama has a vocabulary of 256
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="ok"),
                                       bad.model_copy(update={"tokens": tokens})])
    err = _one_error(_invoke_train(str(tmp_path), *BASE_ARGS, "--run", "v"), "trajectory 'bad'", "row 1",
                     f"id {token} is outside the model's vocabulary of 256")
    assert "field tokens" in err
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_overlong_error_is_refused_before_any_write(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 6, per_shard=2)
    rng = np.random.default_rng(2)
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="long", num_turns=12,
                                                       action_len=(30, 40))])
    args = [a if a != "512" else "200" for a in BASE_ARGS]  # --max-seq-len 200
    _one_error(_invoke_train(str(tmp_path), *args, "--run", "o", "--overlong", "error"), "trajectory 'long'",
               "--max-seq-len 200")
    assert_nothing_written(tmp_path)


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_old_shards_without_nullable_columns_train(tmp_path: Path) -> None:
    """Shards of an older schema that lack group_id and metadata crashed `traj train`."""
    write_synthetic_store(tmp_path, 4, per_shard=2)
    for shard in sorted((tmp_path / "trajectories").glob("*.parquet"))[:1]:
        t = pq.read_table(shard)
        old = t.drop_columns(["group_id", "metadata"])
        pq.write_table(old.replace_schema_metadata(t.schema.metadata), shard)
    r = _invoke_train(str(tmp_path), *BASE_ARGS, "--run", "old", "--format", "json", "--where", "group_id IS NULL")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{"):])["iterations"] == 2


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_read_only_store_is_one_line(tmp_path: Path) -> None:
    """A read-only store gave a PermissionError traceback. Root ignores file modes, so as root
    the store is bind-mounted read-only in a private mount namespace of the child only."""
    import subprocess

    write_synthetic_store(tmp_path, 2)
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", "train", str(tmp_path), *BASE_ARGS,
           "--run", "ro"]
    if os.geteuid() == 0:
        if not shutil.which("unshare"):
            pytest.skip("root without unshare(1): cannot make the store read-only")
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mount --bind -o ro "$0" "$0" || exit 77; exec "$@"', str(tmp_path), *cmd]
    else:
        for p in [tmp_path, *tmp_path.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if k != "TRAJ_TRACEBACK"})
    finally:
        for q in [tmp_path, *tmp_path.rglob("*")]:
            q.chmod(0o755 if q.is_dir() else 0o644)
    if p.returncode == 77 or "unshare failed" in p.stderr:
        pytest.skip(f"cannot mount read-only here: {p.stderr.strip()[-200:]}")
    assert p.returncode == 1, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("error: cannot train into") and "not writable" in lines[-1], p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "policies").exists()


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
@pytest.mark.parametrize("kind", ["no-checkpoint", "latest-not-json", "latest-wrong-shape", "latest-escapes",
                                  "negative-iteration", "policy-garbage", "foreign-pickle", "missing-key",
                                  "wrong-shape", "missing-file"])
def test_a_bad_checkpoint_is_one_line_naming_the_file_and_nothing_changes(trained: Path, tmp_path: Path,
                                                                          kind: str) -> None:
    root = _copy(trained, tmp_path)
    needle = _corrupt(kind, root)
    before = run_files_digest(root)
    _one_error(_invoke_train(str(root), *BASE_ARGS, "--run", "r", "--resume"), needle)
    assert run_files_digest(root) == before  # no record deleted, nothing re-published


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
@pytest.mark.parametrize("command", [["train", "STORE", "--model", "tiny-llama", "--run", "x"], ["demo"]])
def test_missing_train_extra_is_one_line_naming_the_install_command(tmp_path: Path, command: list[str]) -> None:
    """Without the `train` extra both commands ended in ModuleNotFoundError tracebacks; the CLI
    itself must import without torch."""
    import subprocess

    write_synthetic_store(tmp_path / "s", 2)
    args = [str(tmp_path / "s") if a == "STORE" else a for a in command]
    env = {k: v for k, v in os.environ.items() if k != "TRAJ_TRACEBACK"}
    # torch unimportable as if never installed (sys.modules[name] = None: import fails, find_spec is None)
    hide = "import sys; sys.modules['torch'] = None; from trajstore.cli.main import app; app()"
    p = subprocess.run([sys.executable, "-c", hide, *args,
                        *([str(tmp_path / "d")] if command == ["demo"] else ["--seed", "0"])],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: traj {command[0]} needs torch: "), p.stderr
    assert "pip install torch==2.13.0 && pip install 'trajstore[train]'" in lines[0]
    assert not (tmp_path / "s" / "runs").exists()


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_resume_with_nothing_new_warns(trained: Path, tmp_path: Path) -> None:
    """New-user walkthrough: training that trains nothing reported "0 iterations" without a warning."""
    root = _copy(trained, tmp_path)
    first = _invoke_train(str(root), *BASE_ARGS, "--run", "r", "--resume", "--format", "json")  # the 4 left over
    assert first.exit_code == 0, first.output
    r = _invoke_train(str(root), *BASE_ARGS, "--run", "r", "--resume", "--format", "json")
    assert r.exit_code == 0, r.output
    warn = [line for line in r.output.splitlines() if line.startswith("warning: ")]
    assert warn == ["warning: no trajectory was trained in this run (since the checkpoint: 0 rows: 0 trainable)"]
    assert json.loads(r.output[r.output.index("{"):])["warnings"]


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_fewer_policy_steps_than_asked_warns(tmp_path: Path) -> None:
    """A new user asked for 2 steps on a 3-trajectory store and got "0 policy steps" without a
    word: the critic warm-up had used every batch."""
    write_synthetic_store(tmp_path, 3)
    r = _invoke_train(str(tmp_path), "--model", "tiny-llama", "--max-seq-len", "512", "--critic-warmup-steps", "10",
             "--critic-warmup-until", "budget", "--batch-size", "1", "--micro-batch-size", "1", "--max-steps", "2",
             "--run", "few")
    assert r.exit_code == 0, r.output
    warn = [line for line in r.output.splitlines() if line.startswith("warning: ")]
    assert warn == ["warning: made 0 of the 2 policy steps asked for (--max-steps): the data ran out after 3 "
                    "iterations in this run, 3 of them critic warm-up (--critic-warmup-steps)"], r.output


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_overlong_skip_is_said_on_the_console(tmp_path: Path) -> None:
    """New-user walkthrough: with the default --overlong skip, a trajectory longer than
    --max-seq-len was left out with no word on the console (only a data/skipped_overlong metric in
    the run's records): the start says what the data holds, the end warns what was not trained."""
    rng = np.random.default_rng(2)
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="long", num_turns=12,
                                                       action_len=(30, 40))])  # read first
    write_synthetic_store(tmp_path, 4, per_shard=2)
    args = [a if a != "512" else "200" for a in BASE_ARGS]  # --max-seq-len 200
    r = _invoke_train(str(tmp_path), *args, "--run", "s", "--max-steps", "2")
    assert r.exit_code == 0, r.output
    assert "data: 5 rows: 4 trainable (1 longer than --max-seq-len)" in r.output
    warns = [line for line in r.output.splitlines() if line.startswith("warning: ") and "--max-seq-len" in line]
    assert warns == ["warning: 1 trajectory longer than --max-seq-len 200 tokens was skipped, not trained "
                     "(raise --max-seq-len to train them; --overlong error stops at the first)"], r.output
