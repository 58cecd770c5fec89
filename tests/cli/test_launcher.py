"""The installed ``traj`` (:mod:`trajstore.cli.launcher`) imports a command's module only when it
runs, and is otherwise the very same CLI as :mod:`trajstore.cli.main`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

import trajstore
from trajstore import TrajectoryBuilder, write_trajectories
from trajstore.cli.commands import COMMANDS
from trajstore.cli.launcher import launcher_app
from trajstore.cli.main import COMMAND_MODULES, app

runner = CliRunner()


def _run_launcher(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``traj ARGV`` through the launcher in a fresh interpreter: the finished process (its
    stdout, stderr and exit status) and the modules it had imported when the command ended."""
    code = ("import json, sys\nfrom trajstore.cli.launcher import main\nsys.argv = ['traj', *json.loads(sys.argv[1])]\n"
            "status = 0\ntry:\n    main()\nexcept SystemExit as e:\n    status = e.code or 0\n"
            "sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\nsys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=600)
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return done, set(json.loads(line.removeprefix("MODULES ")))


def _modules_after(argv: list[str]) -> set[str]:
    """The modules imported by a fresh interpreter that ran ``traj ARGV`` through the launcher."""
    return _run_launcher(argv)[1]


def test_every_listed_command_is_registered_by_its_module_and_nothing_else() -> None:
    eager = typer.main.get_group(app)
    assert list(eager.list_commands(None)) == list(COMMANDS)  # same names, same order
    for module in COMMAND_MODULES:
        registered = set(typer.main.get_group(module.commands).commands)
        listed = {name for name, entry in COMMANDS.items() if entry.module == module.__name__}
        assert registered == listed, module.__name__


def test_help_lists_every_command_without_importing_any() -> None:
    mods = _modules_after(["--help"])
    assert not {m for m in mods if m.startswith("trajstore.cli.") and m.split(".")[2] not in
                ("app", "commands", "launcher")}, "a command module was imported for --help"
    assert not {"pyarrow", "duckdb", "polars", "torch", "pydantic", "numpy"} & mods
    out = runner.invoke(launcher_app, ["--help"], env={"COLUMNS": "200"}).output
    for name, entry in COMMANDS.items():
        assert f"{name} " in out and entry.summary in out


def test_a_command_imports_only_its_own_module() -> None:
    mods = _modules_after(["sql", "--help"])
    assert "trajstore.cli.audit" in mods
    assert not {"trajstore.cli.train", "trajstore.cli.proxy", "trajstore.cli.view", "torch", "polars"} & mods


NOT_ON_THE_AUDIT_PATH = frozenset({"pandas", "polars", "torch", "transformers", "trajstore.trainer", "matplotlib",
                                   "fastapi", "uvicorn", "httpx"})
"""Packages ``traj stats`` / ``traj sql`` do not use: importing one costs start-up time for nothing
(pyarrow imports pandas, 0.4 s, whenever it is handed a Python list or builds an empty table)."""


def test_audits_of_a_small_store_import_only_what_they_use(tmp_path: Path) -> None:
    store = str(tmp_path / "store")  # no training runs: the empty training-record views are built too
    b = TrajectoryBuilder(trajectory_id="t0", source="sdk")
    b.add_prompt([1, 2, 3])
    b.add_action([4, 5], [-0.1, -0.2], policy_version=0)
    b.set_reward(1.0)
    write_trajectories(store, [b.finish()])
    # The first listing after a write adds the shard index, Arrow built from Python values, for
    # which pyarrow imports pandas (once per new shard set, not per audit): list it here first.
    trajstore.open_store(store).list_shards()
    for argv, expected in ((["stats", store], "trajectories 1"),
                           (["sql", store, "SELECT count(*) AS n FROM trajectories", "--format", "csv"], "n\n1"),
                           (["sql", store, "SELECT * FROM steps", "--format", "json"], "[]")):
        done, mods = _run_launcher(argv)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
        assert expected in done.stdout, (argv, done.stdout)
        imported = {m for m in mods if m.split(".")[0] in NOT_ON_THE_AUDIT_PATH or m.startswith("trajstore.trainer")}
        assert not imported, (argv, sorted(imported))


def test_commands_behave_as_the_eager_app() -> None:
    for argv in (["stats", "--help"], ["bench", "--help"], ["export", "--help"], ["nope"], ["schema", "--format", "json"]):
        lazy = runner.invoke(launcher_app, argv, env={"COLUMNS": "120"})
        eager = runner.invoke(app, argv, env={"COLUMNS": "120"})
        assert (lazy.exit_code, lazy.output) == (eager.exit_code, eager.output), argv


def test_version() -> None:
    for cli in (launcher_app, app):
        done = runner.invoke(cli, ["--version"])
        assert done.exit_code == 0 and done.output.strip() == f"traj (trajstore) {trajstore.__version__}"
    assert trajstore.__version__[0].isdigit()
