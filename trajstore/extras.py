"""Optional dependency groups (``pyproject.toml`` extras) and the one-line error a command gives
when one is missing, checked with ``importlib.util.find_spec`` (nothing is imported, so the core
never imports torch)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from trajstore.errors import MissingExtraError

INSTALL_TRAIN_EXTRA = "pip install torch==2.13.0 && pip install 'trajstore[train]'"
"""Install command of the ``train`` extra (torch first and pinned: no CUDA build is pulled)."""
INSTALL_PLOT_EXTRA = "pip install 'trajstore[plot]'"
"""Install command of the ``plot`` extra (matplotlib)."""


def require(modules: Sequence[str], *, what: str, install: str) -> None:
    """Raise a one-line error naming `install` when one of `modules` is not installed.

    Args:
        modules: top-level module names, e.g. ``("transformers", "gguf", "torch")``.
        what: what needs them, for the message (e.g. ``"--plot"``).
        install: the command that installs them.

    Raises:
        MissingExtraError: "<what> needs <missing modules>: <install>".
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(f"{what} needs {', '.join(missing)}: {install}")
