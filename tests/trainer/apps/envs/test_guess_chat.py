"""trainer/apps/envs/guess_chat.py: the guess-the-number environment, hand-checked."""

from __future__ import annotations

import random

import pytest

from trajstore.trainer.apps.envs.guess_chat import GuessNumberEnv

torch = pytest.importorskip("torch")


pytest.importorskip("transformers")


def test_env_answers_each_guess_and_rewards_success():
    env = GuessNumberEnv(target=7, low=1, high=20, max_turns=4)
    msgs = env.reset()
    assert [m["role"] for m in msgs] == ["system", "user"] and "between 1 and 20" in msgs[1]["content"]
    r = env.step("My guess is 10.")
    assert (r.guess, r.done, r.reward) == (10, False, None) and r.text.startswith("Lower.") and "3 guesses" in r.text
    r = env.step("3")
    assert r.text.startswith("Higher.") and "2 guesses" in r.text
    r = env.step("seven")  # no integer: a reminder, and the turn is used
    assert (r.guess, r.done) == (None, False) and "did not see a number" in r.text and env.guesses[-1] is None
    r = env.step("7")
    assert (r.done, r.reward) == (True, 1.0) and "Correct" in r.text
    with pytest.raises(RuntimeError, match="reset"):
        env.step("7")


def test_env_partial_reward_when_out_of_turns():
    env = GuessNumberEnv(target=7, low=1, high=20, max_turns=4)
    env.reset()
    assert "not between" in env.step("30").text  # out of range: not a valid guess
    env.step("11")
    env.step("2")
    r = env.step("12")
    # valid guesses 11, 2, 12 -> closest distance min(4, 5, 5) = 4; 0.5 * (1 - 4/19) = 0.394736...
    assert r.done and r.reward == pytest.approx(0.5 * (1 - 4 / 19)) and r.reward == pytest.approx(0.3947368)
    env.reset()
    for _ in range(4):
        r = env.step("no idea")
    assert (r.done, r.reward) == (True, 0.0)


def test_env_rejects_bad_setup():
    with pytest.raises(ValueError, match="outside"):
        GuessNumberEnv(target=0, low=1, high=20)
    with pytest.raises(ValueError, match="max_turns must be >= 3"):
        GuessNumberEnv(target=3, max_turns=2)
    envs = [GuessNumberEnv.sample(random.Random(s), low=1, high=5) for s in range(50)]
    assert {e.target for e in envs} == {1, 2, 3, 4, 5}
