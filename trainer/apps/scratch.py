"""Where the benchmarks write unless told: one folder per benchmark under the system's temp dir."""

from __future__ import annotations

import tempfile
from pathlib import Path


def bench_scratch(bench: str) -> Path:
    """``<system temp dir>/trajstore-bench-<bench>`` (``bench``: ``learning``, ``throughput``)."""
    return Path(tempfile.gettempdir()) / f"trajstore-bench-{bench}"
