"""The output folder of an export: built in a hidden staging folder beside it and renamed into place
when complete (a failed or interrupted export leaves nothing at the destination), with the modes
any new folder and file get under the user's umask, and the files the targets write into it
(safetensors through its numpy API, Parquet, JSON)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.export.refusals import ExportError
from trajstore.extras import require
from trajstore.store.fsutil import fsync_dir

MANIFEST_FILE: Final[str] = os.path.join(".trajstore", "export.json")
"""What an export wrote and from what (relative to the output folder). In a hidden folder, so
that ``traj ingest DIR`` and ``datasets.load_dataset(DIR)`` never read it as data."""

INSTALL_EXPORT_EXTRA: Final[str] = "pip install 'trajstore[export]'"
"""Install command of the ``export`` extra (safetensors, huggingface_hub)."""


def part_name(index: int, suffix: str) -> str:
    """``part-00003<suffix>``: the file of part `index` (suffix with its dot, ``.safetensors``)."""
    return f"part-{index:05d}{suffix}"


def _new_stage(parent: str, name: str) -> str:
    """Create an empty hidden folder ``.<name>.partial-<random>`` in `parent` with the mode a plain
    ``mkdir`` gives (0o777 less the umask; ``tempfile.mkdtemp`` would give 0o700)."""
    while True:
        stage = os.path.join(parent, f".{name}.partial-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(stage)
        except FileExistsError:
            continue
        return stage


def _settle(stage: str) -> None:
    """fsync every file and folder under `stage`, and give each the mode a plain ``mkdir`` /
    ``open`` gives under the umask (read off `stage` itself, made by ``mkdir``): some writers
    create private files (safetensors writes 0o600)."""
    dir_mode = os.stat(stage).st_mode & 0o777
    file_mode = dir_mode & 0o666
    for root, dirs, files in os.walk(stage):
        for d in dirs:
            path = os.path.join(root, d)
            if os.stat(path).st_mode & 0o777 != dir_mode:
                os.chmod(path, dir_mode)
        for f in files:
            path = os.path.join(root, f)
            if os.stat(path).st_mode & 0o777 != file_mode:
                os.chmod(path, file_mode)
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(root)


@contextlib.contextmanager
def staged_folder(out: str) -> Iterator[str]:
    """Yield an empty staging folder beside `out`; on a clean exit rename it to `out`.

    `out` must not exist, or be an empty folder (it is replaced); a non-empty folder or a file
    there is refused before anything is written. On an error the staging folder is removed and
    `out` is as it was. Every folder and file gets the mode ``mkdir`` / ``open`` give under the
    umask (0o777 / 0o666 less the umask) and is fsynced before the rename, and the parent folder
    after it.

    Raises:
        ExportError: `out` is a file or a non-empty folder.
        OSError: the parent folder cannot be created or written.
    """
    out = os.path.abspath(out)
    if os.path.isdir(out) and os.listdir(out):
        raise ExportError(f"output folder {out} exists and is not empty: give a new or empty folder "
                          "(an export never writes into or over earlier files)")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ExportError(f"output path {out} is a file, not a folder")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    stage = _new_stage(parent, os.path.basename(out))
    try:
        yield stage
        _settle(stage)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above); fails if something appeared meanwhile
        os.rename(stage, out)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def write_safetensors(out_dir: str, name: str, tensors: Mapping[str, np.ndarray],
                      metadata: Mapping[str, str] | None = None) -> str:
    """Write numpy arrays as one safetensors file `name` (loadable by ``safetensors.torch.load_file``
    and ``safetensors.numpy.load_file``); return `name`.

    Raises:
        MissingExtraError: safetensors is not installed.
    """
    require(("safetensors",), what="traj export (safetensors files)", install=INSTALL_EXPORT_EXTRA)
    # safetensors: an optional extra, loaded when weights are written or read
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, os.path.join(out_dir, name),
              metadata=dict(metadata or {}))
    return name


def write_parquet(out_dir: str, name: str, table: pa.Table) -> str:
    """Write `table` as one Parquet file `name` (folders in `name` are created); return `name`."""
    path = os.path.join(out_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path)
    return name


def write_json(out_dir: str, name: str, value: Any) -> str:
    """Write `value` as indented JSON to `name` (folders in `name` are created); return `name`."""
    path = os.path.join(out_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, sort_keys=False, allow_nan=False)
        fh.write("\n")
    return name


def write_text(out_dir: str, name: str, text: str) -> str:
    """Write `text` to `name` (folders in `name` are created); return `name`."""
    path = os.path.join(out_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return name
