"""Fixtures of the audit tests: the known store's connection (``known_store``, ``build_store`` and
the store's contents: tests/conftest.py and tests/helpers/stores.py)."""

from __future__ import annotations

import pytest

from trajstore import audit


@pytest.fixture
def conn(known_store):
    """An audit connection (the DuckDB views) on the known store."""
    return audit.connect(known_store)
