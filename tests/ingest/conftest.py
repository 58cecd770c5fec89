"""Shared helpers of the ingest tests: the real fixtures and the token oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajstore.hub import load_tokenizer

FIX = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "trajectories"
REPORTED = FIX.parent / "reported"


@pytest.fixture(scope="session")
def tok():
    return load_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def fix() -> Path:
    if not FIX.exists():
        pytest.skip("shared fixtures not present")
    return FIX.resolve()


@pytest.fixture(scope="session")
def reported() -> Path:
    """``../shared/fixtures/reported``: small inputs of reported faults, each with its expected result."""
    if not REPORTED.exists():
        pytest.skip("shared fixtures not present")
    return REPORTED.resolve()
