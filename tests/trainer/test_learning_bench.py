"""The learning benchmark's CI-sized checks: the char codec and tasks by hand, the exact
staleness of the lag simulator, and the smoke run (SAO on the sequence task clearly above the
untrained policy's reward with a fixed seed)."""

from __future__ import annotations

import json
import random

import duckdb
import pytest

from trajstore.trainer.learning_bench.codec import CharCodec, CodecError
from trajstore.trainer.learning_bench.harness import ARMS, BenchError, RunSpec, get_arm, run_one
from trajstore.trainer.learning_bench.suite import SuiteConfig, summarise
from trajstore.trainer.envs import GuessNumberTask, SequenceTask, TaskPhase, sample_episode
from trajstore.policies import list_policy_versions


def test_codec_round_trip_and_errors() -> None:
    c = CharCodec()
    ids = c.encode("G|5<")
    # ids are 2 + position in ALPHABET "0123456789abcdef<>=?RWGS|": G=22, |=24, 5=5, <=16
    assert ids == [24, 26, 7, 18]
    assert c.decode([0, *ids, 1]) == "<s>G|5<</a>"
    assert c.vocab_size == 27
    with pytest.raises(CodecError, match="'x' at position 1"):
        c.encode("Gx")
    with pytest.raises(CodecError, match="token id 27"):
        c.decode([27])


def test_guess_number_feedback_and_reward() -> None:
    t = GuessNumberTask(5, max_turns=3)
    assert t.step("8").observation == "<"  # target 5 is lower than 8
    assert t.step("z").observation == "?"  # not a hex digit: invalid, turn used
    r = t.step("5")
    assert (r.done, r.reward, r.correct) == (True, 1.0, True)
    t = GuessNumberTask(5, max_turns=2)
    t.step("1")
    assert t.step("2") == type(r)("", True, 0.0, False)  # turns used up, not found


def test_sequence_reward_is_fraction_right() -> None:
    s = SequenceTask(3, 2, modulus=10, length=3)  # 3 5 | 7 9 1
    assert s.prompt() == "S35|"
    assert s.step("7").observation == "R7"
    assert s.step("0").observation == "W9"
    r = s.step("1")
    assert r.done and r.reward == pytest.approx(2 / 3)


def test_unknown_arm_is_named() -> None:
    with pytest.raises(BenchError, match="unknown arm 'sao2'.*grpo-dis"):
        get_arm("sao2")
    assert len(ARMS) == 8


def test_staleness_is_exact_and_runs_land_in_the_store(tmp_path) -> None:
    """K = 2: every action of policy step s was sampled by version max(0, s - 2), as read back
    from the store's trajectories and consumption records with DuckDB."""
    spec = RunSpec(task="guess", arm="grpo-dis", staleness=2, steps=6, batch_size=8, eval_episodes=8,
                   phase=TaskPhase(target_low=0, target_high=7), seed=3)
    res = run_one(spec, str(tmp_path / "store"))
    assert [r["version_sampled"] for r in res.history] == [0, 0, 0, 1, 2, 3]
    root = tmp_path / "store"
    assert res.store == str(root)
    # after the last publish (version 6) versions below 6 - K - 1 = 3 are pruned, except v0
    assert list_policy_versions(res.store, spec.run_id) == [0, 3, 4, 5, 6]
    con = duckdb.connect()
    rows = con.sql(
        f"SELECT c.step, max(c.trainer_version - t.max_policy_version), min(c.trainer_version - t.min_policy_version),"
        f" count(*), count(DISTINCT t.group_id) "
        f"FROM read_parquet('{root}/trajectories/*.parquet') t "
        f"JOIN read_parquet('{root}/runs/{spec.run_id}/consumed/*.parquet') c USING (trajectory_id) "
        f"GROUP BY c.step ORDER BY c.step").fetchall()
    # trainer version at step s is s; sampled version max(0, s - 2); 8 episodes in 2 groups of 4
    assert rows == [(s, min(s, 2), min(s, 2), 8, 2) for s in range(6)]
    tok = con.sql(f"SELECT DISTINCT tokenizer FROM read_parquet('{root}/trajectories/*.parquet')").fetchall()
    assert tok == [("trajstore-char-v1",)]


@pytest.mark.parametrize("arm", ["running-mean-prompt8", "gae-no-skip"])
def test_harness_only_arms_train(tmp_path, arm: str) -> None:
    spec = RunSpec(task="sequence", arm=arm, steps=3, batch_size=8, eval_episodes=8, critic_warmup_steps=1)
    res = run_one(spec, str(tmp_path / "s"))
    policy_rows = [r for r in res.history if r["step"] >= 0]
    assert [r["step"] for r in policy_rows] == [0, 1, 2]
    assert all(r["ratio_mean"] == pytest.approx(1.0, abs=1e-4) for r in policy_rows)  # K = 0: on-policy


def test_smoke_sao_learns_the_sequence_task(tmp_path) -> None:
    """The learning signal is real: 120 SAO steps from a random init, seed 0, evaluated on the
    same 256 fresh episodes and sampler seed as the untrained version 0."""
    import torch

    cfg = SuiteConfig.preset("smoke", store_root=str(tmp_path))
    (spec,) = cfg.specs()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: threads only add overhead (the suite runs 1 per run too)
    try:
        res = run_one(spec, str(tmp_path / spec.run_id))
    finally:
        torch.set_num_threads(threads)
    s = summarise(res)
    # untrained: ~1/27 of terms right by chance (27-token vocabulary); trained: > 0.3
    assert s.initial_reward < 0.08
    assert s.final_reward > 0.3
    assert s.final_reward > s.initial_reward + 0.2
    steps = json.loads((tmp_path / spec.run_id / "runs" / spec.run_id / "config.json").read_text())
    assert steps["algo"]["advantage"] == "sao-gae"


def test_phase_shift_draws_from_the_new_range() -> None:
    spec = RunSpec(task="guess", arm="sao", shift_step=5, phase=TaskPhase(target_low=0, target_high=7),
                   shifted=TaskPhase(target_low=8, target_high=15))
    rng = random.Random(0)
    before = {sample_episode("guess", spec.phase_at(4), rng).target for _ in range(200)}
    after = {sample_episode("guess", spec.phase_at(5), rng).target for _ in range(200)}
    assert before == set(range(8)) and after == set(range(8, 16))


def test_cli_refuses_bad_options_in_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["bench", "learning", "--arms", "sao,sao2", "--store-root", str(tmp_path)])
    assert r.exit_code == 1 and "unknown arm 'sao2'" in r.output
    r = runner.invoke(app, ["bench", "learning", "--conditions", "4-1e-3", "--store-root", str(tmp_path)])
    assert r.exit_code == 1 and "K:lr pairs" in r.output
    assert not any(tmp_path.iterdir())  # nothing ran


def test_gae_no_skip_mask_spans_first_to_last_action() -> None:
    """The no-skip variant runs GAE over actions and the observations between them, and not past
    the reward slot. Values 0, reward 1, gamma 1: delta is 1 at the last action and 0 elsewhere,
    so A_t = lambda^(steps to the last action); 4 steps -> lambda = 1 - 1/(1.5 * 4) = 5/6, and
    the first action (3 steps back) gets (5/6)^3 = 0.5787 (skipping observations it would be 1
    step back with lambda = 1 - 1/(1.5 * 2) = 2/3)."""
    import torch

    from trajstore.trainer.learning_bench.harness import _gae_no_skip_fn
    from trajstore.trainer.data import PackedMicroBatch

    class _Cfg:
        class algo:  # noqa: N801 - stands in for AlgoConfig
            gamma, lambda_alpha = 1.0, 1.5

    class _Tr:
        cfg = _Cfg

    # one row of 7 slots: prompt, prompt, action, obs, obs, action, end  (prediction frame)
    mask = torch.tensor([[0, 0, 1, 0, 0, 1, 0]], dtype=torch.bool)
    mb = PackedMicroBatch(*[None] * len(PackedMicroBatch._fields))._replace(
        action_mask=mask, segments=torch.tensor([0, 7]))

    class _S:
        reward = 1.0

    adv, ret, _ = _gae_no_skip_fn(_Tr)(mb, [_S()], torch.full((1, 7), 0.0), {})
    assert adv[0].tolist() == pytest.approx([0, 0, (5 / 6) ** 3, 0, 0, 1, 0], abs=1e-6)
    # returns: 1 on every step from the first to the last action, 0 outside
    assert ret.tolist() == [[0, 0, 1, 1, 1, 1, 0]]
