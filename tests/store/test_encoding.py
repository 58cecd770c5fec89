"""trajstore/store/encoding.py: how a shard is written: the schema-version stamp, the
compression, row groups sized with the metadata they hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tests.helpers.trajectories import fat_trajectory
from trajstore import StoreWriter, open_store
from trajstore.convert import trajectories_to_table


# issue 11: a hole found attacking the store and the SDK (failed before its fix)
def test_row_groups_count_metadata(tmp_store: str) -> None:
    # 12 rows of ~2 MiB metadata with a 4 MiB row-group target: at most 2 rows per row group
    # (2 x 2 MiB reaches the target), so at least 12 / 2 = 6 row groups instead of one.
    trajs = [fat_trajectory(i, 2 * 2**20) for i in range(12)]
    path = open_store(tmp_store).write_table(trajectories_to_table(trajs), row_group_target_mb=4)
    md = pq.read_metadata(path)
    assert md.num_row_groups >= 6
    assert max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 2


def test_schema_version_stamped_in_every_shard(tmp_store: str, make_trajectory: Any) -> None:
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    with StoreWriter(tmp_store, flush_rows=3, flush_seconds=None) as w:
        for i in range(7):
            w.write(make_trajectory(rng, trajectory_id=f"t{i}"))
    paths = [p for p, _ in open_store(tmp_store).shard_paths()]
    assert len(paths) == 3
    for p in paths:
        md = pq.read_metadata(p).metadata
        assert md[b"trajstore.schema_version"] == b"3"
        assert set(pq.read_table(p, columns=["schema_version"]).column(0).to_pylist()) == {3}  # in every row too
        assert pq.read_metadata(p).row_group(0).column(0).compression == "ZSTD"
