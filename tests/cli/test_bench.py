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
    (["throughput", "--arms", "sync,fast"], ["invalid option --arms: unknown arm 'fast'"]),
    (["throughput", "--arms", "sync,async-2-c0"], ["invalid option --arms: unknown arm 'async-2-c0'"]),
    (["throughput", "--preset", "full"], ["invalid option --preset: must be default or smoke"]),
    (["throughput", "--sigmas", "1,x"], ["invalid option --sigmas: must be comma-separated numbers"]),
    (["throughput", "--sigmas", "0"], ["invalid option --sigmas: must be positive"]),
]


@pytest.mark.parametrize(("args", "says"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bench_refuses_a_bad_option_in_one_line_before_running(tmp_path, args: list[str], says: list[str]) -> None:
    r = CliRunner().invoke(app, ["bench", *(a.format(scratch=tmp_path) for a in args), "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and all(s in r.output for s in says), r.output
    assert not any(tmp_path.iterdir())  # nothing ran
