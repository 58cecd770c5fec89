"""The Parquet files ``traj validate`` checks: each given path is a file, a folder (every
``*.parquet`` under it) or a store (the shards under its ``trajectories/``), local or remote
(anything fsspec opens, e.g. ``s3://``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from trajstore.errors import StoreError, TrajstoreError
from trajstore.store.compaction_records import read_records, resolve
from trajstore.store.fsutil import why
from trajstore.store.layout import SHARD_SUFFIX, TRAJECTORIES_DIR
from trajstore.store.open import open_store


class NoSuchInputError(TrajstoreError, ValueError):
    """A path given to check names no file or folder (``path``: the first such)."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"no such file or folder: {path}")


@dataclass(frozen=True)
class InputFile:
    """One Parquet file to check.

    Attributes:
        url: how reports name it (the given path, or the given folder's path joined with its name).
        fs: the filesystem it is on.
        path: its path on `fs`.
    """

    url: str
    fs: fsspec.AbstractFileSystem
    path: str


def _url(given: str, fs: fsspec.AbstractFileSystem, path: str) -> str:
    protocol = given.split("://", 1)[0] + "://" if "://" in given else ""
    return protocol + path if protocol and not path.startswith(protocol) else path


def list_inputs(paths: Sequence[str], *, storage_options: Mapping[str, Any] | None = None) -> list[InputFile]:
    """The files to check, in order: a file as given; a store's trajectory shards (a folder with a
    ``trajectories/`` folder) sorted by name, as readers list them; any other folder's
    ``*.parquet`` files at any depth, sorted by path.

    Raises:
        NoSuchInputError: a path is neither a file nor a folder.
        StoreError: a path cannot be listed (unreachable endpoint, bad credentials or options).
    """
    out: list[InputFile] = []
    for given in paths:
        try:
            out += _list_one(str(given), storage_options)
        except NoSuchInputError:
            raise
        except FileNotFoundError:
            raise NoSuchInputError(str(given)) from None
        except Exception as e:  # an unreachable endpoint, bad credentials or options: one line, the path named
            raise StoreError(f"cannot list {given}: {why(e)}") from e
    return out


def _list_one(given: str, storage_options: Mapping[str, Any] | None) -> list[InputFile]:
    """The Parquet files `given` names (see :func:`list_inputs`)."""
    fs, path = url_to_fs(given, **dict(storage_options or {}))
    path = path.rstrip("/") or path
    if fs.isfile(path):
        return [InputFile(given, fs, path)]
    if not fs.isdir(path):
        raise NoSuchInputError(given)
    shards = f"{path}/{TRAJECTORIES_DIR}"
    if fs.isdir(shards):
        found = [p for p in fs.ls(shards, detail=False) if p.endswith(SHARD_SUFFIX)]
        # what readers read: not the shards a compaction replaced (kept a while for readers)
        visible = set(resolve([p.rsplit("/", 1)[-1] for p in found],
                              read_records(open_store(given, storage_options=storage_options))).visible)
        found = [p for p in found if p.rsplit("/", 1)[-1] in visible]
    else:
        found = [p for p in fs.find(path) if p.endswith(SHARD_SUFFIX)]
    return [InputFile(_url(given, fs, p), fs, p) for p in sorted(found)]
