"""The README's first-day path works as written: its bash block, run as a script on real harness
logs in a fresh folder, ingests, looks, audits and writes a TRL export that loads.

The block's last line, the `traj train` step on SmolLM2-135M, is not run here: on CPU it takes
minutes to tens of minutes (docs/benchmarks.md), and the smallest stand-in, a tiny random model
over SmolLM2's 49,152-token vocabulary, took 7 min for one step on these logs. Its options are
checked by tests/test_readme.py (every `traj` command of the README parses), and one training step
on ingested text-only logs with `--behaviour-logprobs initial-policy` by
tests/trainer/test_text_only_staleness.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.paths import MISSING_SHARED, REPO_ROOT, SHARED_FIXTURES, child_env

README = REPO_ROOT / "README.md"
HEADING = "## Your first day"


def first_day_block() -> str:
    """The first bash block under the README's first-day heading."""
    text = README.read_text()
    assert HEADING in text, f"README.md has no section starting {HEADING!r}"
    block = re.search(r"```bash\n(.*?)```", text.split(HEADING, 1)[1], flags=re.S)
    assert block, "the README's first-day section has no bash block"
    return block.group(1)


def runnable(block: str, logs: Path) -> str:
    """The block with `LOGS` set to `logs` (its own value is relative to the checkout's root) and
    the train step left out (see the module docstring)."""
    lines = block.splitlines()
    assert lines[0].startswith("LOGS="), "the block starts by naming the user's log folder"
    train = [i for i, line in enumerate(lines) if line.startswith("traj train ")]
    assert train == [len(lines) - 1], "the block ends with its one `traj train` step"
    assert "--behaviour-logprobs initial-policy" in lines[-1]  # text-only logs need it
    return "\n".join([f"LOGS={logs}", *lines[1:-1]]) + "\n"


def test_the_first_day_block_is_what_text_only_logs_need() -> None:
    # the flags that lift every blocker of a TRL export of text-only logs, in both export lines
    exports = [line for line in first_day_block().splitlines() if line.startswith("traj export ")]
    assert len(exports) == 2 and "--dry-run" in exports[0]
    for line in exports:
        assert "--to trl" in line and "--where trainable --without logprobs --skip-refused" in line


@pytest.mark.slow
def test_the_first_day_path_runs_as_written(tmp_path: Path) -> None:
    logs_folder = first_day_block().splitlines()[0].split("=", 1)[1].split()[0]
    logs = REPO_ROOT / logs_folder
    if not SHARED_FIXTURES.is_dir() or not logs.is_dir():
        pytest.skip(MISSING_SHARED)
    script = tmp_path / "first_day.sh"
    script.write_text("set -euo pipefail\nset -x\n" + runnable(first_day_block(), logs.resolve()))
    res = subprocess.run(["bash", str(script)], cwd=tmp_path, env=child_env(COLUMNS="120"),
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr[-4000:]}"
    parts = sorted((tmp_path / "my-trl").glob("part-*.parquet"))
    assert parts, "the TRL export wrote no part file"
    table = pq.read_table(parts[0])
    assert table.num_rows > 0 and {"prompt_ids", "completion_ids", "env_mask"} <= set(table.column_names)
    assert "logprobs" not in table.column_names  # --without logprobs: none invented
