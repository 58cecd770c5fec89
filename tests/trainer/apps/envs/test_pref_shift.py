"""trainer/apps/envs/pref_shift.py: the preference chain weights terms by style."""

from __future__ import annotations

import pytest

from trajstore.trainer.apps.envs import PrefChainTask


def test_pref_chain_task_weights_terms_by_style() -> None:
    t = PrefChainTask("easy", 8, 9, preferred="=")  # step 1: 8 9 | 0 1 | 2 3, two turns
    assert t.prompt() == "Ga89|" and t.expected() == "=01"
    assert t.step("<01").observation == "RR01"  # right terms, off style: 2 x 0.25 credit
    r = t.step("=23")  # right terms, preferred style: 2 x 1
    assert r.done and r.reward == pytest.approx((0.5 + 2) / 4)
    t = PrefChainTask("easy", 8, 9, preferred="=")
    t.step("01")  # no style character: no credit even for right digits
    assert t.step("=23").reward == pytest.approx(2 / 4)
