"""Where published policy versions live in a store, and how to find them (torch-free).

``traj train`` publishes (``trajstore.trainer.loop.publish``); rollout servers and ``traj proxy``
read. Layout under ``<root>/policies/<run_id>/`` (paths from :mod:`trajstore.store.layout`)::

    v<N>/model.safetensors   the policy's weights
    v<N>/config.json         its Hugging Face config
    v<N>/tokenizer*.json ... the tokenizer files (the folder loads with from_pretrained)
    v<N>/meta.json           written last: a version is complete iff meta.json exists
    LATEST                   small JSON pointer {"version": N, ...}, replaced atomically
"""

from __future__ import annotations

import json
from typing import Any

from trajstore.errors import TrajstoreError
from trajstore.store import Store, open_store
from trajstore.store.layout import (
    VERSION_META_FILE,
    check_run_id,
    parse_version_dir_name,
    policy_latest_file,
    policy_run_dir,
    version_dir,
)


class PolicyNotFoundError(TrajstoreError):
    """No complete published version matches the request (missing or partially written)."""


def is_complete(s: Store, rel: str) -> bool:
    """Whether the version folder `rel` has its meta.json (asked fresh: object-store listings
    are cached by fsspec, and another process may have published since)."""
    path = s.path(rel, VERSION_META_FILE)
    if not s.is_local:
        s.fs.invalidate_cache(s.path(rel))
    return bool(s.fs.exists(path))


def _read_json(s: Store, rel: str) -> dict[str, Any] | None:
    try:
        data = s.fs.cat_file(s.path(rel))
    except FileNotFoundError:
        return None
    try:
        out = json.loads(data)
    except ValueError as e:
        raise PolicyNotFoundError(f"{s.url(rel)} is not valid JSON: {e}") from e
    if not isinstance(out, dict):
        raise PolicyNotFoundError(f"{s.url(rel)} is not a JSON object")
    return out


def read_policy_meta(store: Store | str, run_id: str, version: int) -> dict[str, Any]:
    """meta.json of a complete published version (keys: run_id, version, step, created_at,
    base_model, tokenizer, architecture, dtype, num_parameters, publish_id, weights_file).

    Raises:
        PolicyNotFoundError: the version does not exist or is not complete (no meta.json).
    """
    s = open_store(store)
    rel = version_dir(run_id, version)
    meta = _read_json(s, f"{rel}/{VERSION_META_FILE}")
    if meta is None:
        raise PolicyNotFoundError(
            f"policy {s.url(rel)} is missing or incomplete (no {VERSION_META_FILE}); published versions: "
            f"{list_policy_versions(s, run_id) or 'none'}")
    return meta


def list_policy_versions(store: Store | str, run_id: str) -> list[int]:
    """Complete published versions of `run_id` (those with meta.json), ascending."""
    s = open_store(store)
    check_run_id(run_id)
    base = s.path(policy_run_dir(run_id))
    if not s.is_local:
        s.fs.invalidate_cache(base)
    try:
        entries = s.fs.ls(base, detail=True)
    except FileNotFoundError:
        return []
    out = []
    for e in entries:
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        version = parse_version_dir_name(name)
        if version is not None and e.get("type") == "directory" and is_complete(s, version_dir(run_id, version)):
            out.append(version)
    return sorted(out)


def latest_policy_version(store: Store | str, run_id: str) -> int | None:
    """The version ``LATEST`` points to, or None when nothing is published yet.

    If the pointer is missing or names a version that is not complete (a crash between the
    version and the pointer), the highest complete version is returned instead.
    """
    s = open_store(store)
    check_run_id(run_id)
    pointer = _read_json(s, policy_latest_file(run_id))
    if pointer is not None and isinstance(pointer.get("version"), int):
        v = pointer["version"]
        if is_complete(s, version_dir(run_id, v)):
            return v
    versions = list_policy_versions(s, run_id)
    return versions[-1] if versions else None
