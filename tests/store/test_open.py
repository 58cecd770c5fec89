"""trajstore/store/open.py: opening a store: an empty URI, a file, or a remote prefix that does not
exist is an error naming it, never an empty store or the working directory."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from trajstore import open_store
from trajstore.convert import trajectories_to_table


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
@pytest.mark.s3
def test_missing_remote_prefix_is_an_error(s3_store_uri: tuple[str, dict[str, Any]], make_trajectory: Any) -> None:
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    uri, opts = s3_store_uri
    store = open_store(uri, storage_options=opts)
    store.write_table(trajectories_to_table([make_trajectory(np.random.default_rng(0), trajectory_id="s3")]))
    assert store.exists()
    typo = uri + "-typo"
    assert not open_store(typo, storage_options=opts).exists()
    so = [f"--storage-option={k}={v}" for k, v in opts.items()]
    for cmd in (["stats", typo], ["sql", typo, "SELECT 1"], ["info", typo]):
        r = CliRunner().invoke(app, [*cmd, *so])
        assert r.exit_code == 1, (cmd, r.output)
        assert "no store at" in r.output and "typo" in r.output and "\n" == r.output[-1] and r.output.count("\n") == 1
    bucket_typo = "s3://no-such-bucket-xyz/store"
    r = CliRunner().invoke(app, ["stats", bucket_typo, *so])
    assert r.exit_code == 1 and "no store at" in r.output
    r = CliRunner().invoke(app, ["info", uri, *so, "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["trajectories"] == 1


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
def test_an_empty_store_uri_is_refused_not_the_current_directory(tmp_path, monkeypatch):
    # `traj ingest "$STORE" x.json` with STORE unset wrote trajectories/ and _tmp/ into
    # the working directory (a checkout) and exited 0.
    from typer.testing import CliRunner

    from trajstore.cli.main import app
    from trajstore.errors import StoreError
    from trajstore.store import open_store

    monkeypatch.chdir(tmp_path)
    for uri in ("", "  "):
        with pytest.raises(StoreError, match="the store URI is empty"):
            open_store(uri)
    (tmp_path / "x.json").write_text("{}")
    res = CliRunner().invoke(app, ["ingest", "", str(tmp_path / "x.json")])
    assert res.exit_code != 0 and "the store URI is empty" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_store_path_that_is_a_file_is_a_store_error(tmp_path) -> None:
    from trajstore.errors import StoreError
    from trajstore.store import open_store

    f = tmp_path / "not-a-dir"
    f.write_text("x")
    with pytest.raises(StoreError, match="is a file, not a directory"):
        open_store(str(f))
