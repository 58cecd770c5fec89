"""trajstore/store/cleanup.py: stale _tmp leftovers of killed writers are removed, fresh ones never."""

from __future__ import annotations

import os
import time
from pathlib import Path

from trajstore import StoreWriter


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t))


# disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_stale_tmp_leftovers_are_removed_by_the_next_writer_never_fresh_ones(tmp_path: Path) -> None:
    tmp = tmp_path / "_tmp"
    (tmp / "policy-old").mkdir(parents=True)
    (tmp / "policy-old" / "model.safetensors").write_bytes(b"x" * 1000)  # a killed publish, 2 h ago
    _age(tmp / "policy-old", 7200)
    (tmp / "policy-busy").mkdir()
    (tmp / "policy-busy" / "model.safetensors").write_bytes(b"y")  # being written right now ...
    _age(tmp / "policy-busy", 7200)
    os.utime(tmp / "policy-busy" / "model.safetensors")  # ... its file was touched a moment ago
    (tmp / "00000000000000000001-otherhost-1-abc.parquet.tmp").write_bytes(b"z" * 10)  # 2 h old shard
    _age(tmp / "00000000000000000001-otherhost-1-abc.parquet.tmp", 7200)
    (tmp / "fresh.tmp").write_bytes(b"f")
    with StoreWriter(str(tmp_path), flush_seconds=None):
        pass
    assert sorted(os.listdir(tmp)) == ["fresh.tmp", "policy-busy"]
