"""Whether an existing location is a trajstore store: what read-side commands refuse (a folder
of logs would read as an empty store) and what writing commands refuse to write into."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from trajstore.errors import StoreError
from trajstore.store.fsutil import why
from trajstore.store.layout import (
    CHECKPOINTS_DIR,
    LATEST_FILE,
    POLICIES_DIR,
    RUN_CONFIG_FILE,
    RUN_CONSUMED_DIR,
    RUN_STEPS_DIR,
    RUNS_DIR,
    SHARD_SUFFIX,
    STORE_FIRST_ENTRIES,
    TRAJECTORIES_DIR,
    parse_version_dir_name,
)

if TYPE_CHECKING:
    from trajstore.store.handle import Store

LAYOUT_RUNS_CHECKED = 16
"""At most this many ``runs/`` / ``policies/`` folders are looked into when deciding whether a
location is a store (:func:`layout_problem`): one of ours is enough."""


def layout_problem(store: Store) -> str | None:
    """Why an existing location is not a trajstore store (None when it is one).

    A store is what this package writes: an empty local directory (a store nothing was
    written to yet), or a root holding at least one of ``trajectories/`` with ``*.parquet``
    shards (or nothing) directly inside, ``runs/<run_id>/`` with ``steps/``, ``consumed/``,
    ``config.json`` or ``checkpoints/``, ``policies/<run_id>/`` with ``LATEST`` or
    ``v<N>/``. Anything else (a folder of logs, a home directory, a Parquet dataset) would
    read as an empty store without a word, so read-side commands refuse it. Hidden entries
    (``.DS_Store``, ``.git``) are ignored. Call on a location that :meth:`Store.exists`.

    Raises:
        StoreError: the location cannot be listed.
    """
    top = _foreign_entries(store)
    if top is None:
        return None
    return (f"{store.uri} is not a trajstore store: it holds {_entries(top)} but no trajectories/*.parquet, "
            f"runs/<id>/ or policies/<id>/{_parquet_hint(top)} (create a store with "
            "`traj ingest DIR LOGS`, the writer SDK `StoreWriter(DIR)` or `traj proxy DIR`; "
            "an empty directory is an empty store)")


def write_problem(store: Store, command: str) -> str | None:
    """Why `command` (``traj ingest``, ``traj demo``, ``traj proxy``) must not create or write
    a store here (None when it may): a local folder that exists, holds visible entries and is
    not a store (the check of :func:`layout_problem`), such as a source tree or a folder of
    notes, would get ``trajectories/``, ``runs/``, ``policies/`` and ``_tmp/`` written into
    it. A missing folder, an empty one and an existing store are fine; remote locations are
    not checked (a prefix has no folder to mistake, and listing it costs a round trip).

    Raises:
        StoreError: the location cannot be listed.
    """
    if not store.is_local or not store.exists():
        return None
    top = _foreign_entries(store)
    if top is None:
        return None
    return (f"{command} would write into {store.uri}, which is not a trajstore store: it holds {_entries(top)} "
            f"but no trajectories/*.parquet, runs/<id>/ or policies/<id>/{_parquet_hint(top)}; nothing was "
            "written (give a new or empty folder, or an existing store)")


def _names(store: Store, *parts: str) -> dict[str, str] | None:
    """Visible entries of a store-relative folder: name -> "file" / "directory" (None when
    it does not exist)."""
    try:
        entries = store.fs.ls(store.path(*parts), detail=True, **({} if store.is_local else {"refresh": True}))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Exception as e:  # unreachable endpoint, bad credentials or options
        raise StoreError(f"cannot list {store.url(*parts)}: {why(e)}") from e
    out = {}
    for e in entries:
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if name and not name.startswith(".") and e["name"].rstrip("/") != store.path(*parts).rstrip("/"):
            out[name] = e.get("type") or "file"
    return out


def _foreign_entries(store: Store) -> dict[str, str] | None:
    """The visible top-level entries of a location that is not a store; None when it is one
    (an empty directory included). The one layout check behind :func:`layout_problem` (read
    side) and :func:`write_problem` (commands that create a store)."""
    def names(*parts: str) -> dict[str, str] | None:
        return _names(store, *parts)

    top = names()
    if not top:
        return None  # an empty directory: an empty store
    if set(top) <= STORE_FIRST_ENTRIES and not (top.get(TRAJECTORIES_DIR) == "directory"
                                          and names(TRAJECTORIES_DIR)):
        # only what a writer creates first (_locks/, _tmp/, an empty trajectories/): a store
        # another process is creating right now (two ingests into a new store at once)
        return None
    if top.get(TRAJECTORIES_DIR) == "directory":
        shards = names(TRAJECTORIES_DIR) or {}
        if not shards or any(n.endswith(SHARD_SUFFIX) for n in shards):
            return None
    for sub, marks in ((RUNS_DIR, (RUN_STEPS_DIR, RUN_CONSUMED_DIR, RUN_CONFIG_FILE, CHECKPOINTS_DIR)),
                       (POLICIES_DIR, (LATEST_FILE,))):
        if top.get(sub) != "directory":
            continue
        for run in sorted(n for n, kind in (names(sub) or {}).items() if kind == "directory")[:LAYOUT_RUNS_CHECKED]:
            inside = names(sub, run) or {}
            if any(m in inside for m in marks) or (sub == POLICIES_DIR and any(
                    parse_version_dir_name(n) is not None for n in inside)):
                return None
    return top


def _entries(top: Mapping[str, str]) -> str:
    return f"{len(top)} entr{'y' if len(top) == 1 else 'ies'}"


def _parquet_hint(top: Mapping[str, str]) -> str:
    """A hint for a folder of .parquet files: likely a store's trajectories/ folder given as its root."""
    parquet = sorted(n for n in top if n.endswith(SHARD_SUFFIX))
    if not parquet:
        return ""
    return (f"; it holds .parquet files ({parquet[0]}{', ...' if len(parquet) > 1 else ''}): give the store's "
            "root, not its trajectories/ folder, or import a Parquet dataset with `traj ingest`")
