"""Fixtures of the export tests: the three-turn store of tests/helpers/export.py and a reader of
what an export wrote."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from tests.helpers.export import three_turn_trajectories, write_store


@pytest.fixture
def store(tmp_path):
    """t1 (three model calls, observations between them) then t2 (one call, a trailing observation)."""
    return write_store(tmp_path / "store", three_turn_trajectories())


@pytest.fixture
def read_out():
    """``read_out(dir, name)``: a safetensors file as numpy arrays, a Parquet file as a dict of
    lists, ``.trajstore/export.json`` as a dict (by suffix)."""
    def read(out, name):
        path = os.path.join(str(out), name)
        if name.endswith(".safetensors"):
            from safetensors.numpy import load_file

            return load_file(path)
        if name.endswith(".parquet"):
            return pq.read_table(path).to_pydict()
        with open(path) as fh:
            return json.load(fh)
    return read
