"""Where the tests find the checkout and the shared data, whatever folder a test file is in."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the checkout)."""

SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
"""Real harness logs and reported-fault inputs (read-only), beside the checkout as CI has them."""

MISSING_SHARED = (f"needs the real harness logs in {SHARED_FIXTURES} (the shared/ folder beside the checkout, "
                  "as CI has it); a plain clone has none")
"""Skip reason of every test that reads ``../shared``."""


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a Python child process that imports ``tests.helpers``: this process's,
    with the repository root first on PYTHONPATH, plus `extra`."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
