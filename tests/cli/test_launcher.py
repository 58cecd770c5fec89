"""The installed ``traj`` (:mod:`trajstore.cli.launcher`) imports a command's module only when it
runs, and is otherwise the very same CLI as :mod:`trajstore.cli.main`."""

from __future__ import annotations

import json
import subprocess
import sys

import typer
from typer.testing import CliRunner

import trajstore
from trajstore.cli.commands import COMMANDS
from trajstore.cli.launcher import launcher_app
from trajstore.cli.main import COMMAND_MODULES, app

runner = CliRunner()


def _modules_after(argv: list[str]) -> set[str]:
    """The modules imported by a fresh interpreter that ran ``traj ARGV`` through the launcher."""
    code = ("import json, sys\nfrom trajstore.cli.launcher import main\nsys.argv = ['traj', *json.loads(sys.argv[1])]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n')")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=600)
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


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
