"""Conventions every ``traj`` command follows (see trajstore.cli.main's docstring), checked on
every registered command, so commands added later inherit the checks; plus flag parsing and
``--format`` on the commands that are cheap to run."""

from __future__ import annotations

import csv
import io
import json
from types import SimpleNamespace

import pytest
import typer.main
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.paths import REPO_ROOT
from trajstore.cli.commands import OLD_SPELLINGS
from trajstore.cli.display import OutputFormat
from trajstore.cli.main import app

runner = CliRunner()
WIDTH = {"COLUMNS": "100"}


def _commands(group=None, path=()):
    group = group or typer.main.get_command(app)
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


ALL = list(_commands())
SERVERS = {("proxy",), ("serve",), ("view",)}


def test_every_command_is_registered():
    names = {" ".join(p) for p, _ in ALL}
    assert {"stats", "sql", "info", "schema", "train", "demo", "ingest", "bench learning"} <= names


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_help_shows_metavars_and_flags_without_values(path):
    res = runner.invoke(app, [*path, "--help"], env=WIDTH)
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output  # a flag takes no value
    usage = next(line for line in res.output.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage, usage
    cmd = dict(ALL)[path]
    for p in cmd.params:
        if p.param_type_name == "argument":  # STORE, QUERY, PATH...: upper case, "..." when it takes several
            shown = (p.metavar or p.name.upper()).removesuffix("...") + ("..." if p.nargs != 1 else "")
            shown = shown if p.required else f"[{shown}]"  # an argument with a default (`traj demo [STORE]`)
            assert shown.strip("[]").isupper() and shown in usage.split(), (shown, usage)


@pytest.mark.parametrize("columns", [80, 100, 200])
@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_help_names_every_option_whole_and_fits_the_terminal(path, columns):
    # At 80 columns typer's rich options table cut `traj train --help` names to
    # `--micro-batch-s…` and wrapped help texts at 16 characters: every option name (and its
    # --no- form) must appear whole, and no line may be wider than the terminal.
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    words = set(res.output.replace("/", " ").replace(",", " ").split())
    for p in dict(ALL)[path].params:
        for name in [*p.opts, *p.secondary_opts] if p.param_type_name == "option" and not p.hidden else []:
            assert name in words, (name, res.output)
    assert "…" not in res.output
    assert max(map(len, res.output.splitlines())) <= columns, res.output


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_help_texts_have_no_hard_line_breaks(path):
    # A docstring wrapped in the source printed its line breaks in `traj --help` ("... (--format
    # json: the" / "JSON description ..."): within a paragraph there is no newline.
    help_text = dict(ALL)[path].help or ""
    assert help_text and all("\n" not in para for para in help_text.split("\n\n")), repr(help_text)


def _required(cmd) -> list[str]:
    """Placeholder values for a command's required arguments and options ("x" each)."""
    args = []
    for p in cmd.params:
        if p.required:
            args += ["x"] if p.param_type_name == "argument" else [p.opts[0], "x"]
    return args


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_format_means_output_format_everywhere(path):
    cmd = dict(ALL)[path]
    fmt = [p for p in cmd.params if "--format" in getattr(p, "opts", [])]
    if path in SERVERS:
        assert not fmt, f"traj {' '.join(path)} serves until stopped: what would --format format?"
        return
    assert fmt, f"traj {' '.join(path)} prints a result but has no --format table|json|csv"
    assert fmt[0].default in ("table", OutputFormat.table)
    # an input format (or anything else) is refused as a usage error that lists the output formats
    res = runner.invoke(app, [*path, *_required(cmd), "--format", "swe-agent"], env=WIDTH)
    assert res.exit_code == 2, res.output
    assert all(f in res.output for f in ("table", "json", "csv")), res.output


def test_boolean_switches_come_in_pairs():
    # Switches with a default behaviour can be turned on and off; report selectors of `stats`
    # only pick what to print.
    selectors = {"--staleness", "--clip", "--coverage", "--rewards", "--lengths", "--statuses", "--duplicates", "--all",
                 "--lineage"}
    for path, cmd in ALL:
        for p in cmd.params:
            if getattr(p, "is_bool_flag", False) and not set(p.opts) & selectors:
                assert p.secondary_opts, f"traj {' '.join(path)} {p.opts[0]} has no --no- form"


# -- flag parsing and --format on commands that are cheap to run -----------------------------


@pytest.fixture
def store(tmp_path, make_trajectory):
    import numpy as np

    rng = np.random.default_rng(3)
    ts.write_trajectories(str(tmp_path / "s"), [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(3)])
    return str(tmp_path / "s")


@pytest.fixture
def fake_train(monkeypatch):
    seen = {}

    def train(cfg, *, resume=False):
        seen["cfg"], seen["resume"] = cfg, resume
        return SimpleNamespace(iterations=2, steps=1, version=1, history=[{"policy/loss": 0.25}],
                               warnings=[], is_main=True)

    monkeypatch.setattr("trajstore.trainer.loop.train.train", train)
    return seen


@pytest.mark.parametrize(("flags", "follow", "resume"), [((), False, False), (("--follow",), True, False),
                                                         (("--follow", "--no-follow", "--resume"), False, True)])
def test_train_boolean_flags(store, fake_train, flags, follow, resume):
    res = runner.invoke(app, ["train", store, "--model", "tiny-llama", "--run", "r", *flags], env=WIDTH)
    assert res.exit_code == 0, res.output
    assert fake_train["cfg"].data.follow is follow and fake_train["resume"] is resume


@pytest.mark.parametrize(("flags", "bf16"), [((), True), (("--no-bf16",), False), (("--no-bf16", "--bf16"), True)])
def test_train_bf16_switch(store, fake_train, flags, bf16):
    # the README's "--bf16, on by default" is a real switch with its --no- form
    res = runner.invoke(app, ["train", store, "--model", "tiny-llama", "--run", "r", *flags], env=WIDTH)
    assert res.exit_code == 0, res.output
    assert fake_train["cfg"].run.bf16 is bf16


def test_train_flag_takes_no_value(store, fake_train):
    res = runner.invoke(app, ["train", store, "--model", "tiny-llama", "--run", "r", "--follow", "yes"])
    assert res.exit_code == 2 and "cfg" not in fake_train  # usage error: 'yes' is an extra argument


def test_train_formats(store, fake_train):
    base = ["train", store, "--model", "tiny-llama", "--run", "r7"]
    doc = json.loads(runner.invoke(app, [*base, "--format", "json"]).stdout)
    assert (doc["run_id"], doc["steps"], doc["last_metrics"]) == ("r7", 1, {"policy/loss": 0.25})
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, [*base, "--format", "csv"]).stdout)))
    assert rows[0]["policy_version"] == "1" and rows[0]["last_metrics.policy/loss"] == "0.25"
    text = runner.invoke(app, [*base], env=WIDTH).stdout
    # the command to copy is one line of its own, whatever the width
    cmd = f"traj sql {store} \"SELECT * FROM step_metrics WHERE run_id = 'r7' ORDER BY step\""
    assert cmd in text.splitlines()
    # the summary line is not cut mid-path at a narrow width (it was: "published under" / "<path>")
    narrow = runner.invoke(app, [*base], env={"COLUMNS": "40"}).stdout
    assert f"published under {store}/policies/r7/" in narrow.splitlines()[0], narrow
    res = runner.invoke(app, [*base, "--format", "text"])
    assert res.exit_code == 2


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_info_formats(store, fmt):
    res = runner.invoke(app, ["info", store, "--format", fmt], env=WIDTH)
    assert res.exit_code == 0, res.output
    if fmt == "json":
        assert json.loads(res.stdout)["trajectories"] == 3
    elif fmt == "csv":
        assert next(csv.DictReader(io.StringIO(res.stdout)))["trajectories"] == "3"
    else:
        assert "trajectories" in res.stdout and "{" not in res.stdout


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_schema_formats(fmt):
    res = runner.invoke(app, ["schema", "--format", fmt], env=WIDTH)
    assert res.exit_code == 0, res.output
    if fmt == "json":
        assert json.loads(res.stdout) == json.loads(ts.schema.schema_json())
    elif fmt == "csv":
        assert "trajectory_id,string,False" in res.stdout
    else:
        assert "schema.trajectories" in res.stdout and "trajectory_id" in res.stdout


def test_demo_formats(monkeypatch, tmp_path):
    from trajstore.trainer.apps import demo

    result = demo.DemoResult(store=str(tmp_path), run_id="d1", episodes=[], versions_loaded=[0],
                             reward_by_version=[{"policy_version": 0, "trajectories": 4, "mean_reward": 0.5,
                                                 "solved": 0.25, "consumed": 4}])
    monkeypatch.setattr(demo, "run_demo", lambda cfg, console=None: result)
    res = runner.invoke(app, ["demo", str(tmp_path), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["run_id"] == "d1"
    res = runner.invoke(app, ["demo", str(tmp_path), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("policy_version,trajectories,mean_reward,solved,consumed\n0,4,0.5,0.25,4")


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_the_store_is_the_first_argument_and_storage_options_read_key_value(path):
    # one spelling of the store on every command: the first argument STORE (`traj ingest STORE
    # PATH...`, `traj proxy STORE`, `traj demo [STORE]`; `--store` was an option on those three);
    # a second store is an option reading STORE (`traj proxy --policy-store STORE`); every command
    # that opens a store that may be remote takes --storage-option KEY=VALUE (StorageOptions)
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    cmd = dict(ALL)[path]
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    options = {p.opts[0]: p for p in cmd.params if p.param_type_name == "option"}
    assert "--store" not in options, path
    takes_store = any(p.name == "store" for p in args)
    if takes_store:
        assert args[0].name == "store", (path, [p.name for p in args])
        assert "STORE" in next(line for line in res.output.splitlines() if "Usage:" in line)
        if path != ("demo",):  # the demo's store is a local folder (its children are local processes)
            assert "--storage-option" in options, path
        if "--store" not in OLD_SPELLINGS.get(path[0], {}):  # a user who reaches for `--store` is told the form
            res = runner.invoke(app, [*path, "--store", "s"])
            assert res.exit_code == 2, (path, res.output)
            assert f"no option --store: the store is the first argument (traj {cmd.name} STORE ...)" in res.output
    if "--storage-option" in options:
        p = options["--storage-option"]
        assert p.metavar == "KEY=VALUE" and p.multiple, path
    if "--policy-store" in options:
        assert options["--policy-store"].metavar == "STORE" and "STORE" in res.output, path


def test_commands_render_tables_through_the_shared_renderer():
    # a rich Table built in a command would skip the layout rules (keys in every part, constants
    # in the title, empty tables as one line); trajstore.cli.display is the one place tables are made
    root = REPO_ROOT
    renderer = root / "cli" / "table_layout.py"  # where trajstore.cli.display's tables are drawn
    offenders = [str(f.relative_to(root)) for d in ("cli", "trainer", "trajstore")
                 for f in sorted((root / d).rglob("*.py")) if f != renderer and "rich.table" in f.read_text()]
    assert offenders == []


@pytest.mark.parametrize("path", [p for p, c in ALL if any(o.opts[0] == "--format" for o in c.params)],
                         ids=[" ".join(p) for p, c in ALL if any(o.opts[0] == "--format" for o in c.params)])
def test_an_option_given_twice_with_different_values_is_bad_usage(path, tmp_path):
    # `--store a --store b` silently used b (click keeps the last value): one line, exit 2, nothing run
    cmd = dict(ALL)[path]
    res = runner.invoke(app, [*path, *_required(cmd), "--format", "json", "--format=csv"])
    assert res.exit_code == 2, res.output
    assert res.output == ("error: option --format given twice with different values (--format json, "
                          "--format=csv): give it once\n"), res.output


def test_the_same_value_twice_and_repeatable_options_are_accepted(tmp_path):
    ts.write_trajectories(str(tmp_path), [])  # an empty store
    res = runner.invoke(app, ["info", str(tmp_path), "--format", "json", "--format", "json"])
    assert res.exit_code == 0, res.output
    # flags: the later one wins (test_train_boolean_flags)
    res = runner.invoke(app, ["sql", str(tmp_path), "SELECT 1 AS one", "--storage-option", "a=1",
                              "--storage-option", "b=2", "--format", "csv"])
    assert "given twice" not in res.output, res.output
