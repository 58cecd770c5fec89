"""trajstore/ingest/formats/rewards.py: outcome and score fields as rewards; anything else refused naming
the field."""

from __future__ import annotations

import pytest

from trajstore.ingest.formats.rewards import bool_reward, float_reward
from trajstore.ingest.records import RecordError


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("value, reward", [("true", 1.0), ("True", 1.0), (" false ", 0.0), ("1", 1.0), ("0", 0.0),
                                           ("yes", 1.0), ("no", 0.0), (True, 1.0), (0, 0.0), (1.0, 1.0)])
def test_outcome_spellings_are_rewards(value, reward):
    r = bool_reward(value, "resolved")
    assert (r.value, r.raw, r.field) == (reward, value, "resolved")


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("value, reason", [
    ("maybe", "resolved is 'maybe': expected true/false or 1/0"),
    (2, "resolved is 2: expected true/false or 1/0"),
    ([True], "resolved is [True]: expected true/false or 1/0"),
])
def test_other_outcomes_are_refused_naming_the_field(value, reason):
    with pytest.raises(RecordError) as e:
        bool_reward(value, "resolved")
    assert str(e.value) == reason


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("value, expected", [("0.5", 0.5), (" -1 ", -1.0), ("true", 1.0), (3, 3.0), (False, 0.0)])
def test_numeric_reward_strings_are_numbers(value, expected):
    assert float_reward(value, "score").value == expected


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("value, reason", [
    ("n/a", "score is 'n/a': expected a finite number"),
    ("NaN", "score is 'NaN': expected a finite number"),
    (float("inf"), "score is inf: expected a finite number"),
    (10 ** 400, "score is an integer of 401 digits: too large for a reward (a finite number)"),
    ({"a": 1}, "score is a dict ({'a': 1}): expected a finite number"),
], ids=["text", "nan-text", "inf", "10**400", "object"])
def test_non_numeric_rewards_are_refused_naming_the_field(value, reason):
    with pytest.raises(RecordError) as e:
        float_reward(value, "score")
    assert str(e.value) == reason
