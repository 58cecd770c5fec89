"""The output folder of an export: built in a hidden staging folder beside it and renamed into place
when complete (a failed or interrupted export leaves nothing at the destination), and the files
the targets write into it (safetensors through its numpy API, Parquet, JSON)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
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


@contextlib.contextmanager
def staged_folder(out: str) -> Iterator[str]:
    """Yield an empty staging folder beside `out`; on a clean exit rename it to `out`.

    `out` must not exist, or be an empty folder (it is replaced); a non-empty folder or a file
    there is refused before anything is written. On an error the staging folder is removed and
    `out` is as it was. Every file is fsynced before the rename, and the parent folder after it.

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
    stage = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.partial-", dir=parent)
    try:
        yield stage
        for root, _, files in os.walk(stage):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    os.fsync(fh.fileno())
            fsync_dir(root)
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
