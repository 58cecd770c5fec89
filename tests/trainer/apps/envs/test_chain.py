"""trainer/apps/envs/chain.py: the chain task grades terms and reveals the truth."""

from __future__ import annotations

import pytest

from trajstore.trainer.apps.envs import ChainTask


def test_chain_task_grades_terms_and_reveals_the_truth() -> None:
    t = ChainTask("medium", 2, 5)  # step 3: 2 5 | 8 1 | 4 7 | 0 3, three turns
    assert t.prompt() == "Sb25|" and t.expected() == "81"
    r = t.step("81")
    assert (r.observation, r.done) == ("RR81", False)
    r = t.step("40")  # 4 right, 0 wrong (7)
    assert (r.observation, r.done) == ("RW47", False)
    r = t.step("0")  # one digit only: both terms wrong
    assert r.done and r.reward == pytest.approx((2 + 1 + 0) / 6)
    with pytest.raises(ValueError, match="needs x1 = x0 \\+ 7"):
        ChainTask("hard", 1, 2)
