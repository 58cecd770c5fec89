"""Fixtures of the `traj` command tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trajstore as ts


@pytest.fixture
def small_store(tmp_path: Path, make_trajectory: Any) -> str:
    rng = np.random.default_rng(0)
    uri = str(tmp_path / "s")
    ts.write_trajectories(uri, [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(3)])
    return uri
