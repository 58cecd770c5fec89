"""trainer/config.py: the typed training config refuses values that cannot work."""

from __future__ import annotations

import pytest

from trajstore.trainer.config import RunConfig


# issue 14: disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_keep_versions_1_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        RunConfig(run_id="r", keep_versions=1)
