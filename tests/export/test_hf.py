"""trajstore/export/hf.py: a folder datasets.load_dataset reads (the stored rows, a card), and the
upload with a mocked HfApi (private by default, the local manifest left behind)."""

from __future__ import annotations

import math
import os
import shutil
from unittest import mock

import pytest

from tests.helpers.export import UNCHECKED
from trajstore.export import ExportError, ExportOptions, export_store


def test_load_dataset_reads_the_export(store, tmp_path):
    datasets = pytest.importorskip("datasets", reason="pip install 'trajstore[export-check]'")
    out = tmp_path / "hf"
    r = export_store(store, "hf", str(out), UNCHECKED)
    assert r.files == ["data/part-00000.parquet", "README.md"]
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))["train"]
    assert ds.num_rows == 2
    t1, t2 = ds[0], ds[1]
    assert (t1["trajectory_id"], t2["trajectory_id"]) == ("t1", "t2")
    assert t1["tokens"] == [11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61]
    assert t2["tokens"] == [14, 23, 32]  # the rows as stored: the trailing observation is kept here
    assert t1["action_logprobs"] == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5, -0.6])  # one per action token
    assert [(s["kind"], s["start"], s["end"], s["policy_version"]) for s in t1["spans"]] == [
        ("prompt", 0, 3, None), ("action", 3, 5, 3), ("observation", 5, 6, None), ("action", 6, 9, 4),
        ("observation", 9, 11, None), ("action", 11, 12, 4)]
    assert (t1["reward"], t2["reward"], t2["status"]) == (1.0, 0.5, "truncated")
    assert not any(isinstance(v, float) and math.isnan(v) for v in t1["action_logprobs"])


def test_push_uploads_the_folder_to_a_private_dataset_repo(store, tmp_path):
    api = mock.Mock()
    api.create_repo.return_value = "https://huggingface.co/datasets/me/traj"
    r = export_store(store, "hf", str(tmp_path / "hf"), ExportOptions(allow_secrets=True, push="me/traj"), hub_api=api)
    assert r.pushed == "https://huggingface.co/datasets/me/traj"
    api.create_repo.assert_called_once_with("me/traj", repo_type="dataset", private=True, exist_ok=True)
    kw = api.upload_folder.call_args.kwargs
    assert (kw["folder_path"], kw["repo_id"], kw["repo_type"]) == (str(tmp_path / "hf"), "me/traj", "dataset")
    assert kw["ignore_patterns"] == [".trajstore/*"]  # the manifest names local store paths: it stays here
    assert os.path.isfile(tmp_path / "hf" / ".trajstore" / "export.json")


def test_push_public_and_only_for_hf(store, tmp_path):
    api = mock.Mock()
    export_store(store, "hf", str(tmp_path / "hf"), ExportOptions(allow_secrets=True, push="me/traj", private=False),
                 hub_api=api)
    assert api.create_repo.call_args.kwargs["private"] is False
    with pytest.raises(ExportError, match=r"^invalid --push: only --to hf uploads to the Hub, not --to verl$"):
        export_store(store, "verl", str(tmp_path / "v"), ExportOptions(allow_secrets=True, push="me/traj"), hub_api=api)
    assert not (tmp_path / "v").exists()


def _load(datasets, folder, cache):
    return datasets.load_dataset(str(folder), cache_dir=str(cache))["train"]["trajectory_id"]


def test_each_export_loads_its_own_rows_from_a_folder_of_the_same_name(store, tmp_path):
    # before: the second of two exports into folders both named "hf" loaded the first one's rows
    # (the card's configs made them one entry of the datasets cache)
    datasets = pytest.importorskip("datasets", reason="pip install 'trajstore[export-check]'")
    from tests.helpers.export import refused_trajectories, write_store

    other = write_store(tmp_path / "other", refused_trajectories())
    cache = tmp_path / "cache"  # one cache for all, as a user's ~/.cache/huggingface/datasets
    export_store(store, "hf", str(tmp_path / "a" / "hf"), UNCHECKED)
    export_store(other, "hf", str(tmp_path / "b" / "hf"), UNCHECKED)
    assert _load(datasets, tmp_path / "a" / "hf", cache) == ["t1", "t2"]
    assert _load(datasets, tmp_path / "b" / "hf", cache) == ["no-lp", "no-reward", "no-action"]
    # a new export into the same folder (emptied first: an export needs a new or empty folder)
    shutil.rmtree(tmp_path / "a" / "hf")
    export_store(other, "hf", str(tmp_path / "a" / "hf"), ExportOptions(allow_secrets=True, limit=1))
    assert _load(datasets, tmp_path / "a" / "hf", cache) == ["no-lp"]


def test_the_card_is_a_hub_card_with_the_features_datasets_derives(store, tmp_path):
    datasets = pytest.importorskip("datasets", reason="pip install 'trajstore[export-check]'")
    from huggingface_hub import DatasetCard

    from trajstore.schema import TRAJECTORY_SCHEMA

    export_store(store, "hf", str(tmp_path / "hf"), UNCHECKED)
    data = DatasetCard.load(str(tmp_path / "hf" / "README.md")).data
    assert (data.size_categories, data.task_categories, data.language) == (
        ["n<1K"], ["reinforcement-learning", "text-generation"], ["en"])
    assert data.pretty_name == "Agent trajectories (sdk)"  # named after its sources, not the folder
    info = data.dataset_info
    assert info["features"] == datasets.Features.from_arrow_schema(TRAJECTORY_SCHEMA)._to_yaml_list()
    assert info["splits"] == [{"name": "train", "num_examples": 2}] and info["config_name"] == data.configs[0][
        "config_name"]
