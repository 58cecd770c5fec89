"""trajstore/cli/bench.py: `traj bench learning` and `traj bench throughput` refuse bad options in one line."""

from __future__ import annotations


def test_cli_refuses_bad_options_in_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["bench", "learning", "--arms", "sao,sao2", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --arms" in r.output and "unknown arm 'sao2'" in r.output
    r = runner.invoke(app, ["bench", "learning", "--preset", "full", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and ("invalid option --preset: must be default, smoke, calibrate, long, power, "
                                 "staleness, held-out") in r.output
    r = runner.invoke(app, ["bench", "learning", "--seeds", "0,x", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --seeds: must be comma-separated integers" in r.output
    r = runner.invoke(app, ["bench", "learning", "--claim-seeds", "dis-vs-none=64,nope=3", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --claim-seeds: 'nope=3' is not KEY=N" in r.output
    r = runner.invoke(app, ["bench", "learning", "--claim-seeds", "dis-vs-none=0", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --claim-seeds: 'dis-vs-none=0'" in r.output
    r = runner.invoke(app, ["bench", "learning", "--compare", str(tmp_path), "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --compare: it needs --reanalyse DIR" in r.output
    assert not any(tmp_path.iterdir())  # nothing ran


def test_throughput_refuses_bad_options_in_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["bench", "throughput", "--arms", "sync,fast", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --arms: unknown arm 'fast'" in r.output
    r = runner.invoke(app, ["bench", "throughput", "--arms", "sync,async-2-c0", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --arms: unknown arm 'async-2-c0'" in r.output
    r = runner.invoke(app, ["bench", "throughput", "--preset", "full", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --preset: must be default or smoke" in r.output
    r = runner.invoke(app, ["bench", "throughput", "--sigmas", "1,x", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --sigmas: must be comma-separated numbers" in r.output
    r = runner.invoke(app, ["bench", "throughput", "--sigmas", "0", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --sigmas: must be positive" in r.output
    assert not any(tmp_path.iterdir())  # nothing ran
