"""examples/write_plain_pyarrow.py writes a shard without importing trajstore, and `traj validate`
passes it (the example exits with its status)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "write_plain_pyarrow.py"


def test_plain_pyarrow_shard_validates(tmp_path: Path) -> None:
    assert not re.search(r"^\s*(import|from)\s+trajstore", EXAMPLE.read_text(), re.M)
    out = tmp_path / "t.parquet"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(out)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert out.exists() and "no problems" in p.stdout
