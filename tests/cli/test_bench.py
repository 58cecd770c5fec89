"""trajstore/cli/bench.py: `traj bench learning` and `traj bench throughput` refuse bad options in one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import app

BAD_OPTIONS = [
    (["learning", "--arms", "sao,sao2"], ["invalid option --arms", "unknown arm 'sao2'"]),
    (["learning", "--preset", "full"], ["invalid option --preset: must be default, smoke, calibrate, long, power, "
                                        "staleness, held-out"]),
    (["learning", "--seeds", "0,x"], ["invalid option --seeds: must be comma-separated integers"]),
    (["learning", "--claim-seeds", "dis-vs-none=64,nope=3"], ["invalid option --claim-seeds: 'nope=3' is not KEY=N"]),
    (["learning", "--claim-seeds", "dis-vs-none=0"], ["invalid option --claim-seeds: 'dis-vs-none=0'"]),
    (["learning", "--compare", "{scratch}"], ["invalid option --compare: it needs --reanalyse DIR"]),
    # an empty value is not "the default": --reanalyse "" once started a whole default run
    (["learning", "--reanalyse", ""], ["invalid option --reanalyse: empty"]),
    (["learning", "--resume", " "], ["invalid option --resume: empty"]),
    (["learning", "--seeds", ""], ["invalid option --seeds: empty"]),
    (["learning", "--reanalyse", "{scratch}", "--compare", ""], ["invalid option --compare: empty"]),
    # what to train comes from the run's config.json when reanalysing
    (["learning", "--reanalyse", "{scratch}", "--seeds", "0,1"], ["invalid option --seeds: not with --reanalyse"]),
    (["learning", "--reanalyse", "{scratch}", "--mismatch", "engine"],
     ["invalid option --mismatch: not with --reanalyse"]),
    (["learning", "--reanalyse", "{scratch}", "--preset", "smoke"], ["invalid option --preset: not with --reanalyse"]),
    # values that would only fail (or quietly misbehave) after warm starts were trained
    (["learning", "--seeds", "0,0,1"], ["invalid option --seeds: 0 is given twice"]),
    (["learning", "--seeds", "-1,2"], ["invalid option --seeds: each value must be from 0 to 2147483647 (got -1)"]),
    (["learning", "--seeds", "99999999999999999999999"], ["invalid option --seeds: each value must be from 0"]),
    (["learning", "--arms", "sao,sao"], ["invalid option --arms: sao is given twice"]),
    (["learning", "--sweep-workers", "0"], ["invalid option --sweep-workers: each value must be at least 1 (got 0)"]),
    (["learning", "--sweep-workers", "8,8"], ["invalid option --sweep-workers: 8 is given twice"]),
    (["learning", "--claim-seeds", "dis-vs-none=3,dis-vs-none=5"], ["invalid option --claim-seeds: dis-vs-none is "
                                                                    "given twice"]),
    (["learning", "--claim-seeds", "dis-vs-none=\u00b2"], ["invalid option --claim-seeds: 'dis-vs-none=\u00b2'"]),
    (["learning", "--claim-seeds", "dis-vs-none=99999999999"], ["and N from 1 to 10000"]),
    (["throughput", "--arms", "sync,fast"], ["invalid option --arms: unknown arm 'fast'"]),
    (["throughput", "--arms", "sync,async-2-c0"], ["invalid option --arms: unknown arm 'async-2-c0'"]),
    (["throughput", "--preset", "full"], ["invalid option --preset: must be default or smoke"]),
    (["throughput", "--sigmas", "1,x"], ["invalid option --sigmas: must be comma-separated numbers"]),
    (["throughput", "--sigmas", "0"], ["invalid option --sigmas: must be positive"]),
    (["throughput", "--reanalyse", ""], ["invalid option --reanalyse: empty"]),
    (["throughput", "--reanalyse", "{scratch}/nope"], ["invalid option --reanalyse: no such directory"]),
    (["throughput", "--seeds", "1,1"], ["invalid option --seeds: 1 is given twice"]),
    (["throughput", "--sigmas", "1.0,1"], ["invalid option --sigmas: 1.0 is given twice"]),
]


@pytest.mark.parametrize(("args", "says"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bench_refuses_a_bad_option_in_one_line_before_running(tmp_path, args: list[str], says: list[str]) -> None:
    r = CliRunner().invoke(app, ["bench", *(a.format(scratch=tmp_path) for a in args), "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and all(s in r.output for s in says), r.output
    assert not any(tmp_path.iterdir())  # nothing ran


def test_learning_help_names_every_preset() -> None:
    from trajstore.trainer.apps.learning_bench.presets import PRESETS

    r = CliRunner().invoke(app, ["bench", "learning", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    help_text = " ".join(r.output.split())
    assert [p for p in PRESETS if f"{p} (" not in help_text] == []
