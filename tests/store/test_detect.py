"""trajstore/store/detect.py: is this location a store? Read-side commands refuse a location that is
not a store (a folder of logs, a home directory, a bucket prefix of other data) instead of reading
it as an empty store with exit status 0; an empty directory and a store nothing was written to yet
still read as empty stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from trajstore.cli.main import app
from trajstore.errors import StoreError
from trajstore.store import open_existing_store, open_store

runner = CliRunner()
WIDTH = {"COLUMNS": "200"}

READ_COMMANDS = [["stats", "{s}"], ["sql", "{s}", "SELECT count(*) AS n FROM trajectories"], ["info", "{s}"],
                 ["runs", "{s}"], ["migrate", "{s}", "--dry-run"],
                 ["train", "{s}", "--model", "tiny-llama", "--run", "r"],
                 ["train", "{s}", "--model", "tiny-llama", "--run", "r", "--follow"]]


def _args(cmd: list[str], store: str) -> list[str]:
    return [a.replace("{s}", store) for a in cmd]


def _logs_folder(root: Path) -> Path:
    """Like ../shared/fixtures: a folder of logs whose ``trajectories/`` holds logs, not shards."""
    (root / "trajectories" / "swe-agent").mkdir(parents=True)
    (root / "trajectories" / "SOURCES.md").write_text("where the logs come from\n")
    (root / "trajectories" / "swe-agent" / "a.traj").write_text("{}")
    (root / "README.md").write_text("logs\n")
    return root


@pytest.mark.parametrize("cmd", READ_COMMANDS, ids=lambda c: " ".join(c[:1] + c[3:]))
def test_a_folder_that_is_not_a_store_is_refused_in_one_line(tmp_path: Path, cmd: list[str]) -> None:
    folder = _logs_folder(tmp_path / "logs")
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    res = runner.invoke(app, _args(cmd, str(folder)), env=WIDTH)
    assert res.exit_code == 1, res.output  # an error (README "Exit status")
    line = res.stderr
    assert line.count("\n") == 1 and line.startswith("error: "), line
    assert f"{folder} is not a trajstore store" in line and "traj ingest" in line and "Traceback" not in line
    assert res.stdout == ""
    # nothing was written into it (train --follow would otherwise create runs/ and wait forever)
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before


def test_the_message_points_at_the_root_when_given_a_trajectories_folder(tmp_path: Path,
                                                                         make_trajectory: Any) -> None:
    ts.write_trajectories(str(tmp_path / "s"), [make_trajectory(np.random.default_rng(0), trajectory_id="a")])
    res = runner.invoke(app, ["info", str(tmp_path / "s" / "trajectories")], env=WIDTH)
    assert res.exit_code == 1 and "give the store's root" in res.stderr and ".parquet" in res.stderr, res.output
    assert res.stderr.count("\n") == 1


def test_empty_directories_and_new_stores_read_as_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    hidden_only = tmp_path / "hidden-only"
    hidden_only.mkdir()
    (hidden_only / ".DS_Store").write_bytes(b"\0")
    writer_made = tmp_path / "writer-made"
    with ts.StoreWriter(str(writer_made), flush_seconds=None):
        pass  # opened and closed with nothing written: the store exists and is empty
    assert (writer_made / "trajectories").is_dir()
    for store in (empty, hidden_only, writer_made):
        res = runner.invoke(app, ["sql", str(store), "SELECT count(*) AS n FROM trajectories", "--format", "json"])
        assert res.exit_code == 0 and json.loads(res.stdout) == {"result": [{"n": 0}]}, (store, res.output)
        res = runner.invoke(app, ["info", str(store), "--format", "json"])
        assert res.exit_code == 0 and json.loads(res.stdout)["trajectories"] == 0, (store, res.output)
        res = runner.invoke(app, ["runs", str(store), "--format", "json"])
        assert res.exit_code == 0 and json.loads(res.stdout)["runs"] == [], (store, res.output)
        res = runner.invoke(app, ["stats", str(store), "--statuses"], env=WIDTH)
        assert res.exit_code == 0 and "no rows" in res.stdout, (store, res.output)


def test_stores_with_only_training_records_or_policies_are_stores(tmp_path: Path) -> None:
    records = tmp_path / "records"
    (records / "runs" / "r1" / "steps").mkdir(parents=True)
    policies = tmp_path / "policies"
    (policies / "policies" / "r1").mkdir(parents=True)
    (policies / "policies" / "r1" / "LATEST").write_text('{"version": 0}')
    versions = tmp_path / "versions"
    (versions / "policies" / "r1" / "v3").mkdir(parents=True)
    for store in (records, policies, versions):
        assert open_existing_store(str(store)).uri == str(store)
    # a runs/ or policies/ folder of something else (TensorBoard's runs/<name>/events...) is no store
    tensorboard = tmp_path / "tensorboard"
    (tensorboard / "runs" / "exp1").mkdir(parents=True)
    (tensorboard / "runs" / "exp1" / "events.out.tfevents.1").write_bytes(b"x")
    with pytest.raises(StoreError, match="is not a trajstore store: it holds 1 entry but no"):
        open_existing_store(str(tensorboard))


def test_missing_ok_still_refuses_a_folder_that_is_not_a_store(tmp_path: Path) -> None:
    assert not open_existing_store(str(tmp_path / "later"), missing_ok=True).exists()
    with pytest.raises(StoreError, match="not a trajstore store"):
        open_existing_store(str(_logs_folder(tmp_path / "logs")), missing_ok=True)


@pytest.mark.s3
def test_s3_prefix_of_other_data_is_not_a_store(s3_store_uri: tuple[str, dict[str, Any]],
                                                make_trajectory: Any) -> None:
    uri, opts = s3_store_uri
    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    so = [f"--storage-option={k}={v}" for k, v in opts.items()]
    # an empty bucket: nothing is stored under that prefix (as a mistyped prefix)
    res = runner.invoke(app, ["info", f"s3://{bucket}", *so])
    assert res.exit_code == 1 and f"no store at s3://{bucket}" in res.stderr and "nothing is stored" in res.stderr
    s = open_store(uri, storage_options=opts)
    s.fs.pipe_file(f"{bucket}/logs/run1/events.jsonl", b"{}\n")
    s.fs.pipe_file(f"{bucket}/logs/README.md", b"logs\n")
    ts.write_trajectories(s, [make_trajectory(np.random.default_rng(0), trajectory_id="a")])
    for cmd in (["stats", "{s}"], ["sql", "{s}", "SELECT 1"], ["info", "{s}"], ["runs", "{s}"]):
        res = runner.invoke(app, [*_args(cmd, f"s3://{bucket}/logs"), *so], env=WIDTH)
        assert res.exit_code == 1 and f"s3://{bucket}/logs is not a trajstore store" in res.stderr, (cmd, res.output)
        assert res.stderr.count("\n") == 1
    # the bucket root holds the store's prefix and the logs: no store either, the store itself is one
    res = runner.invoke(app, ["info", f"s3://{bucket}", *so])
    assert res.exit_code == 1 and "not a trajstore store" in res.stderr
    res = runner.invoke(app, ["info", uri, *so, "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["trajectories"] == 1, res.output


# -- write side: commands that create or write a store refuse a folder of something else ----------

WRITE_COMMANDS = {
    "ingest": ["ingest", "{s}", "{logs}"],
    "demo": ["demo", "{s}", "--model", "tiny-llama", "--steps", "1"],
    "proxy": ["proxy", "{s}", "--upstream", "http://127.0.0.1:9", "--port", "0"],
}


def _chat_log(root: Path) -> Path:
    p = root / "chat.jsonl"
    p.write_text(json.dumps([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) + "\n")
    return p


def _write_args(name: str, store: Path, logs: Path) -> list[str]:
    return [a.replace("{s}", str(store)).replace("{logs}", str(logs)) for a in WRITE_COMMANDS[name]]


def _project_folder(root: Path) -> Path:
    """A mistyped STORE: a source tree (hidden entries do not count)."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "notes.txt").write_text("notes\n")
    (root / ".git").mkdir()
    return root


@pytest.fixture
def no_model_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """demo and proxy reach their library entry (no model, no server): each records its name and exits 7."""
    import typer

    import trajstore.proxy.app as proxy_app
    import trajstore.trainer.apps.demo as demo

    reached: list[str] = []

    def stop(name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> None:
            reached.append(name)
            raise typer.Exit(7)
        return run

    monkeypatch.setattr(demo, "run_demo", stop("demo"))
    monkeypatch.setattr(proxy_app, "run_proxy", stop("proxy"))
    return reached


@pytest.mark.parametrize("name", sorted(WRITE_COMMANDS))
def test_write_commands_refuse_a_non_empty_folder_that_is_not_a_store(tmp_path: Path, name: str,
                                                                      no_model_runs: list[str]) -> None:
    folder = _project_folder(tmp_path / "project")
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    res = runner.invoke(app, _write_args(name, folder, _chat_log(tmp_path)), env=WIDTH)
    assert res.exit_code == 1, res.output
    line = res.stderr
    assert line.count("\n") == 1 and line.startswith("error: "), line
    assert f"traj {name} would write into {folder}, which is not a trajstore store: it holds 2 entries" in line
    assert "give a new or empty folder, or an existing store" in line and "Traceback" not in line
    assert no_model_runs == []  # refused before a model loads or a server starts
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before  # nothing created in it


@pytest.mark.parametrize("name", sorted(WRITE_COMMANDS))
def test_write_commands_accept_a_missing_or_empty_folder_or_a_store(tmp_path: Path, name: str,
                                                                    no_model_runs: list[str],
                                                                    make_trajectory: Any) -> None:
    missing = tmp_path / "new" / "store"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".DS_Store").write_bytes(b"\0")
    store = tmp_path / "store"
    ts.write_trajectories(str(store), [make_trajectory(np.random.default_rng(0), trajectory_id="a")])
    logs = _chat_log(tmp_path)
    for folder in (missing, empty, store):
        res = runner.invoke(app, _write_args(name, folder, logs), env=WIDTH)
        if name == "ingest":
            assert res.exit_code == 0, (folder, res.output)
            assert len(list((folder / "trajectories").glob("*.parquet"))) == (2 if folder == store else 1)
        else:
            assert res.exit_code == 7 and no_model_runs[-1] == name, (folder, res.output)
    assert no_model_runs == ([] if name == "ingest" else [name] * 3)


def test_open_store_for_writing_checks_local_folders_only(tmp_path: Path) -> None:
    from trajstore.store import open_store_for_writing

    assert open_store_for_writing(str(tmp_path / "new"), command="traj ingest").uri == str(tmp_path / "new")
    assert not (tmp_path / "new").exists()  # opening creates nothing
    with pytest.raises(StoreError, match=r"traj ingest would write into .*logs, which is not a trajstore store: "
                                         r"it holds 2 entries"):
        open_store_for_writing(str(_logs_folder(tmp_path / "logs")), command="traj ingest")
    shards = tmp_path / "shards"  # a store's trajectories/ folder given as its root
    shards.mkdir()
    (shards / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(StoreError, match="it holds 1 entry .*give the store's root"):
        open_store_for_writing(str(shards), command="traj ingest")
    # remote URLs are not checked (nothing is listed: no endpoint is needed)
    s3 = open_store_for_writing("s3://bucket/else", command="traj ingest",
                                storage_options={"endpoint_url": "http://127.0.0.1:9", "anon": True})
    assert s3.uri == "s3://bucket/else"
    # a memory:// store is gone when the command's process exits: `traj ingest memory://x LOGS`
    # said it wrote 1 trajectory that nothing could ever read
    with pytest.raises(StoreError, match=r"traj ingest cannot write into memory://somewhere/else: a memory:// store "
                                         r"lives only inside one Python process"):
        open_store_for_writing("memory://somewhere/else", command="traj ingest")
    # the writer SDK is unchanged: a program choosing its folder is trusted
    with ts.StoreWriter(str(tmp_path / "logs"), flush_seconds=None):
        pass


def test_a_store_another_writer_is_creating_is_a_store(tmp_path: Path) -> None:
    # two `traj ingest` into a new store at once: the second saw the first's _locks/ and was
    # refused as "not a trajstore store" (CI's slow step)
    from trajstore.store import open_store_for_writing

    creating = tmp_path / "creating"
    (creating / "_locks").mkdir(parents=True)
    (creating / "_locks" / "ingest.lock").write_bytes(b"")
    (creating / "_tmp").mkdir()
    (creating / "trajectories").mkdir()
    assert open_store_for_writing(str(creating), command="traj ingest").uri == str(creating)
    (creating / "trajectories").rmdir()  # (an empty trajectories/ alone makes any folder a store)
    assert open_store_for_writing(str(creating), command="traj ingest").uri == str(creating)
    (creating / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not a trajstore store"):
        open_store_for_writing(str(creating), command="traj ingest")
