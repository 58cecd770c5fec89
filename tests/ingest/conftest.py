"""Shared helpers of the ingest tests: the real fixtures and the token oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajstore.hub import load_tokenizer


@pytest.fixture(scope="session")
def tok():
    return load_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def fix(fixtures_dir: Path) -> Path:
    """``../shared/fixtures/trajectories`` (tests using it skip in a plain clone, see tests/conftest.py)."""
    return fixtures_dir / "trajectories"


@pytest.fixture(scope="session")
def reported(fixtures_dir: Path) -> Path:
    """``../shared/fixtures/reported``: small inputs of reported faults, each with its expected result."""
    if not (fixtures_dir / "reported").is_dir():
        pytest.skip(f"needs {fixtures_dir / 'reported'} (reported-fault fixtures in the shared folder)")
    return fixtures_dir / "reported"
