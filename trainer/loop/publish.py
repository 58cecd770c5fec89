"""Publishing policy weights into the store so rollout workers pick up new versions.

Layout (under ``<root>/policies/<run_id>/``)::

    v<N>/model.safetensors   the policy's state dict (tied tensors stored once)
    v<N>/config.json         the model's Hugging Face config
    v<N>/tokenizer*.json ... the tokenizer's files, when the tokenizer name resolves offline
                             (trajstore.hub), so the folder loads with from_pretrained alone
    v<N>/meta.json           written last: a version is complete iff meta.json exists
    LATEST                   small JSON pointer {"version": N, ...}, replaced atomically

Locally a version is written to ``_tmp/`` (fsynced) and renamed into place, so it appears
whole. On object stores the weights and config are PUT first and ``meta.json`` last; readers
only trust versions with ``meta.json``, whose ``publish_id`` must match the one stamped in the
weights file's header.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shutil
import tempfile
import uuid
import warnings
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from trajstore.errors import StoreError, TrajstoreError
from trajstore.hub import load_tokenizer, resolve_model
from trajstore.policies import (
    PolicyNotFoundError,
    is_complete,
    latest_policy_version,
    list_policy_versions,
    read_policy_meta,
)
from trajstore.store import Store, open_store
from trajstore.store.layout import (
    VERSION_CONFIG_FILE,
    VERSION_META_FILE,
    VERSION_WEIGHTS_FILE,
    policy_latest_file,
    policy_run_dir,
    version_dir,
    version_dir_name,
)

if TYPE_CHECKING:
    import torch

POLICY_FORMAT = "trajstore.policy"
POLICY_FORMAT_VERSION = 1
_PUBLISH_ID_KEY = "trajstore.publish_id"


class PolicyMismatchError(TrajstoreError):
    """Published weights do not fit the model they are loaded into (missing / unexpected keys
    or shapes), or a version's files belong to different publishes."""


def _unwrap(model: Any) -> Any:
    """The bare module under DDP / FSDP-style ``.module`` wrappers."""
    while hasattr(model, "module") and not hasattr(model, "config"):
        model = model.module
    return model


def publish_policy(store: Store | str, run_id: str, version: int, model: torch.nn.Module, *,
                   step: int | None = None, base_model: str | None = None,
                   tokenizer: str | None = None, state_dict: dict[str, torch.Tensor] | None = None,
                   dtype: torch.dtype | None = None) -> str:
    """Write `model`'s weights as ``policies/<run_id>/v<version>/`` and point ``LATEST`` at it.

    Tied tensors (e.g. input embeddings = LM head) are stored once, under the name safetensors'
    ``save_model`` keeps (the alphabetically first), so ``load_model`` and ``from_pretrained``
    load the file. Publishing a version that already exists (a resumed run re-publishing)
    replaces it; a reader never sees a mix of the two.

    Args:
        store: the store or its URI.
        run_id: training run id (one path component).
        version: policy version N >= 0 (the trainer's version counter).
        model: a transformers causal LM (or a ``.module`` wrapper such as DDP around one).
        step: training step the weights come from, recorded in meta.json.
        base_model: name of the model training started from (e.g. the store's ``model``).
        state_dict: the weights to write, when `model`'s own are not whole on this process
            (FSDP: the full state dict gathered on rank 0); `model` then gives the config, the
            names of tied tensors and the metadata. Default: ``model.state_dict()``.
        dtype: floating-point dtype of the published weights (e.g. ``torch.bfloat16``, what
            rollout servers run); default: as they are.
        tokenizer: tokenizer name the policy's token ids belong to (the store's ``tokenizer``).
            When it resolves offline (``smollm2-135m``, its canonical name, a local HF directory
            or .gguf file; :func:`trajstore.hub.resolve_model`), the tokenizer's files are written
            beside the weights so that rollout servers (vLLM, SGLang, ``traj serve``) can load the
            folder with ``from_pretrained``; ``meta.json`` lists them under ``tokenizer_files``.

    Returns:
        The store-relative folder ``policies/<run_id>/v<N>``.

    Raises:
        ValueError: bad `run_id` or negative `version`.
        StoreError: the filesystem refused a write (the version is then not complete).
    """
    s = open_store(store)
    rel = version_dir(run_id, version)
    model = _unwrap(model)
    publish_id = uuid.uuid4().hex
    config = getattr(model, "config", None)
    meta = {
        "format": POLICY_FORMAT,
        "format_version": POLICY_FORMAT_VERSION,
        "run_id": run_id,
        "version": int(version),
        "step": None if step is None else int(step),
        "created_at": datetime.now(timezone.utc).isoformat(),
        "base_model": base_model if base_model is not None else getattr(config, "_name_or_path", None) or None,
        "tokenizer": tokenizer,
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "dtype": str(dtype or next(model.parameters()).dtype).removeprefix("torch."),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "publish_id": publish_id,
        "weights_file": VERSION_WEIGHTS_FILE,
    }
    if config is not None and dtype is not None:  # from_pretrained(dtype="auto") and vLLM read it
        config = copy.copy(config)
        config.dtype = dtype
    files = [(VERSION_CONFIG_FILE, config.to_json_string().encode())] if config is not None else []
    tok_files = tokenizer_files(tokenizer) if tokenizer else ()
    meta["tokenizer_files"] = [name for name, _ in tok_files]
    files += list(tok_files)
    meta_bytes = (json.dumps(meta, indent=2) + "\n").encode()
    save_model = _weights_writer(model, state_dict, dtype)
    try:
        if s.is_local:
            _publish_local(s, rel, model, meta_bytes, files, publish_id, save_model)
        else:
            _publish_remote(s, rel, model, meta_bytes, files, publish_id, save_model)
        pointer = {"version": int(version), "path": version_dir_name(version), "publish_id": publish_id,
                   "updated_at": meta["created_at"]}
        s.write_bytes(policy_latest_file(run_id), (json.dumps(pointer) + "\n").encode())
    except OSError as e:
        raise StoreError(f"could not publish policy {s.url(rel)}: {e}") from e
    return rel


def tied_names(model: torch.nn.Module) -> dict[str, str]:
    """Names of tied parameters that are not stored, each mapped to the name that is (of each
    group of names sharing one tensor, the alphabetically first is kept, as safetensors'
    ``save_model`` / ``load_model`` do). Works on FSDP-sharded models (a tied DTensor is one
    object too)."""
    out = {}
    for names in tied_groups(model):
        keep, *drop = sorted(names)
        out.update({d: keep for d in drop})
    return out


def tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """The state-dict names of `model`, grouped by the tensor they share (a group of one for
    an untied parameter or buffer)."""
    groups: dict[int, list[str]] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(t), []).append(name)
    return list(groups.values())


def _weights_writer(model: Any, state_dict: dict[str, Any] | None, dtype: Any) -> Any:
    """A ``save_model(model, filename, metadata=...)`` stand-in that writes `state_dict`
    (default ``model.state_dict()``) with tied duplicates dropped and floats cast to `dtype`."""

    def save(_model: Any, filename: str, metadata: dict[str, str] | None = None) -> None:
        # safetensors: an optional extra, loaded when weights are written or read
        from safetensors.torch import save_file

        sd = state_dict if state_dict is not None else model.state_dict()
        tied = tied_names(model)
        meta = dict(metadata or {})
        out = {}
        for name, t in sd.items():
            if name in tied:
                meta.setdefault(name, tied[name])  # what save_model records for a dropped name
                continue
            t = t.detach()
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                t = t.to(dtype)
            out[name] = t.contiguous()
        save_file(out, filename, metadata=meta)

    return save


@functools.lru_cache(maxsize=4)
def tokenizer_files(tokenizer: str) -> tuple[tuple[str, bytes], ...]:
    """(file name, bytes) of the tokenizer's ``save_pretrained`` files, or () when the name does
    not resolve offline (e.g. a bare identity string recorded by an older store)."""
    try:
        resolve_model(tokenizer)
    except TrajstoreError:
        return ()
    try:
        tok = load_tokenizer(tokenizer)
    except (OSError, ValueError, KeyError) as e:  # e.g. a model directory that holds no tokenizer files
        warnings.warn(f"published versions carry no tokenizer files: tokenizer {tokenizer!r} does not load "
                      f"({str(e).splitlines()[0] if str(e) else type(e).__name__})", stacklevel=2)
        return ()
    with tempfile.TemporaryDirectory(prefix="trajstore-tokenizer-") as tmp:
        tok.save_pretrained(tmp)
        return tuple((name, open(os.path.join(tmp, name), "rb").read()) for name in sorted(os.listdir(tmp))
                     if os.path.isfile(os.path.join(tmp, name)))


def _publish_local(s: Store, rel: str, model: Any, meta: bytes, files: list[tuple[str, bytes]], publish_id: str,
                   save_model: Any) -> None:
    with s.local_dir_commit(rel, prefix="policy-") as tmp:  # a re-publish replaces the old folder
        save_model(model, os.path.join(tmp, VERSION_WEIGHTS_FILE), metadata={_PUBLISH_ID_KEY: publish_id})
        for name, data in [*files, (VERSION_META_FILE, meta)]:
            with open(os.path.join(tmp, name), "wb") as fh:
                fh.write(data)


def _publish_remote(s: Store, rel: str, model: Any, meta: bytes, files: list[tuple[str, bytes]], publish_id: str,
                    save_model: Any) -> None:
    fs = s.fs
    meta_path = s.path(rel, VERSION_META_FILE)
    if is_complete(s, rel):  # re-publish: un-complete the old version before replacing its files
        fs.rm_file(meta_path)
    with tempfile.TemporaryDirectory(prefix="trajstore-publish-") as tmp:
        local = os.path.join(tmp, VERSION_WEIGHTS_FILE)
        save_model(model, local, metadata={_PUBLISH_ID_KEY: publish_id})
        fs.put_file(local, s.path(rel, VERSION_WEIGHTS_FILE))
    for name, data in files:
        fs.pipe_file(s.path(rel, name), data)
    fs.pipe_file(meta_path, meta)
    fs.invalidate_cache(s.path(rel))


def prune_versions(store: Store | str, run_id: str, *, keep: int) -> list[int]:
    """Delete all but the `keep` newest complete published versions of `run_id`.

    The version ``LATEST`` names and the one before it are never deleted, whatever `keep` says:
    a rollout server that read ``LATEST`` a moment ago may still be loading the previous one.
    Folders without ``meta.json`` (a publish in progress) are left alone.

    Args:
        keep: versions to keep (>= 2); 0 keeps every version.

    Returns:
        The versions deleted, ascending.

    Raises:
        ValueError: `keep` is 1 or negative.
    """
    if keep == 0:
        return []
    if keep < 2:
        raise ValueError(f"keep must be 0 (all) or >= 2 (the latest and the one before), got {keep}")
    s = open_store(store)
    versions = list_policy_versions(s, run_id)
    latest = latest_policy_version(s, run_id)
    protected = set(versions[-keep:])
    if latest is not None:
        before = [v for v in versions if v < latest]
        protected |= {latest, *before[-1:]}
    doomed = [v for v in versions if v not in protected]
    for v in doomed:
        rel = version_dir(run_id, v)
        if s.is_local:  # un-complete first (meta.json), so that no reader trusts a half-deleted version
            with contextlib.suppress(FileNotFoundError):
                os.unlink(s.path(rel, VERSION_META_FILE))
            shutil.rmtree(s.path(rel), ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                s.fs.rm_file(s.path(rel, VERSION_META_FILE))
            s.fs.rm(s.path(rel), recursive=True)
    return doomed


def load_policy_into(model: torch.nn.Module, store: Store | str, run_id: str, version: int | None = None, *,
                     device: str | None = None) -> int:
    """Load a published version's weights into an existing model of the same architecture.

    Args:
        model: the model to overwrite in place (a ``.module`` wrapper is unwrapped).
        store: the store or its URI.
        run_id: the training run that published the weights.
        version: the version to load; None = the latest (see :func:`latest_policy_version`).
        device: where tensors are materialised before copying (default: the model's device).

    Returns:
        The version loaded.

    Raises:
        PolicyNotFoundError: nothing published, or the version is missing / incomplete.
        PolicyMismatchError: keys or shapes differ from the model's, or the weights file is not
            the one meta.json describes (a publish interrupted mid-way).
    """
    # safetensors: an optional extra, loaded when weights are written or read
    from safetensors import safe_open
    from safetensors.torch import load_model

    s = open_store(store)
    if version is None:
        version = latest_policy_version(s, run_id)
        if version is None:
            raise PolicyNotFoundError(f"no policy published under {s.url(policy_run_dir(run_id))}")
    meta = read_policy_meta(s, run_id, version)
    rel = version_dir(run_id, version)
    model = _unwrap(model)
    dev = device or str(next(model.parameters()).device)
    with tempfile.TemporaryDirectory(prefix="trajstore-policy-") as tmp:
        if s.is_local:
            path = s.path(rel, meta.get("weights_file", VERSION_WEIGHTS_FILE))
        else:
            path = os.path.join(tmp, VERSION_WEIGHTS_FILE)
            try:
                s.fs.get_file(s.path(rel, meta.get("weights_file", VERSION_WEIGHTS_FILE)), path)
            except FileNotFoundError as e:
                raise PolicyNotFoundError(f"policy {s.url(rel)} has {VERSION_META_FILE} but no weights file") from e
        if not os.path.exists(path):
            raise PolicyNotFoundError(f"policy {s.url(rel)} has {VERSION_META_FILE} but no weights file")
        try:
            with safe_open(path, framework="pt") as fh:
                stamped = (fh.metadata() or {}).get(_PUBLISH_ID_KEY)
        except Exception as e:  # safetensors raises its own error types for a truncated header
            raise PolicyMismatchError(f"{s.url(rel, VERSION_WEIGHTS_FILE)} is not a readable safetensors file: "
                                      f"{e}") from e
        if stamped != meta.get("publish_id"):
            raise PolicyMismatchError(
                f"{s.url(rel, VERSION_WEIGHTS_FILE)} belongs to publish {stamped}, but {VERSION_META_FILE} describes "
                f"{meta.get('publish_id')} (an interrupted re-publish); reload later")
        try:
            missing, unexpected = load_model(model, path, strict=False, device=dev)
        except RuntimeError as e:  # shape mismatch from load_state_dict
            raise PolicyMismatchError(f"cannot load {s.url(rel, VERSION_WEIGHTS_FILE)} into {type(model).__name__}: "
                                      f"{str(e).splitlines()[0]} ...") from e
    if missing or unexpected:
        raise PolicyMismatchError(
            f"{s.url(rel, VERSION_WEIGHTS_FILE)} does not match {type(model).__name__}: missing keys "
            f"{sorted(missing)[:5]}{' ...' if len(missing) > 5 else ''}, unexpected keys "
            f"{sorted(unexpected)[:5]}{' ...' if len(unexpected) > 5 else ''}")
    return version
