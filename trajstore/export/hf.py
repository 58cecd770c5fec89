"""Hugging Face: a dataset folder that ``datasets.load_dataset(DIR)`` reads (the stored rows as
Parquet under ``data/``, a generated dataset card as README.md), and its upload to the Hub with
``huggingface_hub`` (a private dataset repository unless asked otherwise).

Folder layout checked against datasets 5.2.0 (PyPI): a README.md whose YAML ``configs`` names the
data files is what ``load_dataset`` on a local folder follows; hidden folders are not data files."""

from __future__ import annotations

import os
from typing import Any, Final

from trajstore.export.card import card_text
from trajstore.export.files import INSTALL_EXPORT_EXTRA, MANIFEST_FILE, part_name, write_parquet, write_text
from trajstore.export.target import Finish, Part, Target
from trajstore.extras import require

DATA_DIR: Final[str] = "data"
"""Where the Parquet files go inside the dataset folder (the card's ``configs`` point at them)."""

CARD_FILE: Final[str] = "README.md"


def write_part(part: Part) -> list[str]:
    """The part's stored rows, every schema column as the reader gives it (the spans as a list of
    structs, metadata as JSON text), as ``data/part-NNNNN.parquet``."""
    return [write_parquet(part.out_dir, os.path.join(DATA_DIR, part_name(part.index, ".parquet")), part.rows)]


def write_card(fin: Finish) -> list[str]:
    return [write_text(fin.out_dir, CARD_FILE, card_text(fin.conn, where=fin.where, reproduce=fin.reproduce,
                                                         name=fin.name, selection=fin.selection,
                                                         out_dir=fin.out_dir, license=fin.license))]


def push_to_hub(folder: str, repo_id: str, *, private: bool = True, token: str | None = None,
                api: Any = None) -> str:
    """Upload an exported dataset folder to the Hub dataset repository `repo_id` (created when
    missing, private unless `private` is False); the local manifest (store paths) stays behind.

    Args:
        api: a ``huggingface_hub.HfApi`` (default: a new one with `token`).

    Returns:
        The repository URL.

    Raises:
        MissingExtraError: huggingface_hub is not installed.
    """
    if api is None:
        require(("huggingface_hub",), what="traj export --push", install=INSTALL_EXPORT_EXTRA)
        # huggingface_hub: the export extra, loaded only for --push
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="dataset",
                      ignore_patterns=[os.path.dirname(MANIFEST_FILE) + "/*"],
                      commit_message="traj export --to hf")
    return str(url)


def push_plan(repo_id: str, *, private: bool, parts: int) -> dict[str, Any]:
    """What :func:`push_to_hub` would do for an export of `parts` data files, touching nothing:
    the repository it creates when missing (and its visibility) and the files it uploads."""
    return {"repository": f"datasets/{repo_id}", "create": f"a {'private' if private else 'public'} dataset "
            "repository, if it does not exist (an existing one is kept as it is)",
            "upload": [os.path.join(DATA_DIR, part_name(i, ".parquet")) for i in range(parts)] + [CARD_FILE],
            "not_uploaded": os.path.dirname(MANIFEST_FILE) + "/ (the manifest names local paths)"}


TARGET = Target(
    name="hf", description="Hugging Face dataset folder: the stored rows as Parquet and a generated dataset card",
    fields={}, required=frozenset(),
    alignment="the stored rows: tokens, spans and the action-aligned log-prob column of the trajstore schema",
    checked_against="datasets 5.2.0: load_dataset on a local folder with a README.md configs block",
    uses_samples=False, write=write_part, loader='datasets.load_dataset("DIR")', finish=write_card)
