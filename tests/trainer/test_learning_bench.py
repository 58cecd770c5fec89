"""The learning benchmark's parts at CI size, each against hand-computed cases: the tasks, the
event timeline, the GAE variants, the rollout engine (against transformers), the statistics, and
one tiny run through the real pipeline (versions mix inside trajectories, consumption in
completion order, the arms' replacements reach the loss)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from trajstore.trainer.apps.envs import ChainTask, PrefChainTask, draw_instance, make_episode
from trajstore.trainer.apps.learning_bench.codec import CharCodec, CodecError
from trajstore.trainer.apps.learning_bench.estimators import no_skip_gae, turn_index, turn_level_gae
from trajstore.trainer.apps.learning_bench.schedule import AsyncConfig, simulate
from trajstore.trainer.apps.learning_bench.stats import CLAIMS, auc, bootstrap_interval, verdict

from tests.helpers.paths import REPO_ROOT


def test_codec_round_trip_and_errors() -> None:
    c = CharCodec()
    ids = c.encode("G|5<")
    # ids are 2 + position in ALPHABET "0123456789abcdef<>=?RWGS|": G=22, |=24, 5=5, <=16
    assert ids == [24, 26, 7, 18]
    assert c.decode([0, *ids, 1]) == "<s>G|5<</a>"
    assert c.vocab_size == 27
    with pytest.raises(CodecError, match="'x' at position 1"):
        c.encode("Gx")


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


def test_pref_chain_task_weights_terms_by_style() -> None:
    t = PrefChainTask("easy", 8, 9, preferred="=")  # step 1: 8 9 | 0 1 | 2 3, two turns
    assert t.prompt() == "Ga89|" and t.expected() == "=01"
    assert t.step("<01").observation == "RR01"  # right terms, off style: 2 x 0.25 credit
    r = t.step("=23")  # right terms, preferred style: 2 x 1
    assert r.done and r.reward == pytest.approx((0.5 + 2) / 4)
    t = PrefChainTask("easy", 8, 9, preferred="=")
    t.step("01")  # no style character: no credit even for right digits
    assert t.step("=23").reward == pytest.approx(2 / 4)


def test_draw_instance_covers_the_families_with_their_steps() -> None:
    rng = random.Random(0)
    seen = {draw_instance(rng) for _ in range(300)}
    assert {f for f, _, _ in seen} == {"easy", "medium", "hard"}
    assert all((x1 - x0) % 10 == {"easy": 1, "medium": 3, "hard": 7}[f] for f, x0, x1 in seen)


def test_timeline_by_hand() -> None:
    """2 workers, batch 2, every turn 1 s (sigma 0), training 0.5 s; prompts have 1, 2, 1, 1, ... turns.
    t=0: r0 (1 turn) and r1 (2 turns: actions at 0 and 1) start; t=1: r0 done, r2 starts;
    t=2: r1 and r2 done; iteration 0 takes [r0, r1] (completion order) and publishes v1 at 2.5;
    t=3: r3 and r4 done, iteration 1 takes [r2, r3]; v2 at 3.5. r2's action at t=1 used v0 and is
    trained at trainer version 1: staleness 1."""
    cfg = AsyncConfig(workers=2, batch_size=2, turn_latency_sigma=0.0, train_step_s=0.5)
    tl = simulate([1, 2] + [1] * 20, cfg, iterations=2, warmup=0, seed=0)
    assert [(it.start, it.end, it.rollouts, it.publishes) for it in tl.iterations] == [
        (2.0, 2.5, [0, 1], 1), (3.0, 3.5, [2, 3], 2)]
    assert tl.rollouts[1].action_starts == [0.0, 1.0]
    assert tl.publish_times == [0.0, 2.5, 3.5]
    assert tl.version_at(2.49) == 0 and tl.version_at(2.5) == 1
    assert tl.version_at(1) - tl.version_at(tl.rollouts[2].action_starts[0]) == 0
    # warm-up iterations publish nothing
    tl = simulate([1, 2] + [1] * 20, cfg, iterations=2, warmup=1, seed=0)
    assert [it.publishes for it in tl.iterations] == [None, 1] and tl.publish_times == [0.0, 3.5]


def test_grpo_groups_wait_for_their_slowest_member() -> None:
    cfg = AsyncConfig(workers=8, batch_size=8, group_size=4, turn_latency_sigma=1.0, train_step_s=0.3)
    rng = random.Random(1)
    tl = simulate([rng.choice([2, 3, 4]) for _ in range(400)], cfg, iterations=12, warmup=0, seed=3)
    for it in tl.iterations:
        assert len(it.rollouts) == 8
        ends = [tl.rollouts[k].end for k in it.rollouts]
        assert max(ends) <= it.start
        prompts = [tl.rollouts[k].prompt for k in it.rollouts]
        assert all(prompts.count(p) == 4 for p in prompts)  # whole groups only
    # a group member that finished early waited: some consumed rollout ended well before its batch
    assert any(it.start - tl.rollouts[k].end > 1.0 for it in tl.iterations for k in it.rollouts)


def _row(vals: list[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mask = torch.tensor([[0, 1, 1, 0, 1, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0, 0, 0, 0, 0, 1.0]])
    return rewards, torch.tensor([vals]), mask


def test_turn_level_and_no_skip_gae_by_hand() -> None:
    """Slots [prompt, a, a, obs, a, a], values [0, .2, .4, 9, .5, .7], reward 1 on the last slot,
    gamma 1, lambda 0.5.
    turn-last: V = (.4, .7): A_1 = 1 - .7 = .3; A_0 = (.7 - .4) + .5 * .3 = .45.
    turn-avg:  V = (.3, .6): A_1 = .4;  A_0 = (.6 - .3) + .5 * .4 = .5.
    no-skip over slots 1..5 (the observation's value 9 enters): A5 = .3; A4 = .2 + .15 = .35;
    A3 = (.5 - 9) + .5 * .35 = -8.325; A2 = (9 - .4) + .5 * -8.325 = 4.4375; A1 = .2 + .5 * 4.4375 = 2.41875."""
    r, v, m = _row([0, .2, .4, 9, .5, .7])
    assert turn_index(m).tolist() == [[-1, 0, 0, -1, 1, 1]]
    last = turn_level_gae(r, v, m, value_at="last", gamma=1.0, lam=0.5)
    assert last[0].tolist() == pytest.approx([0, .45, .45, 0, .3, .3])
    avg = turn_level_gae(r, v, m, value_at="mean", gamma=1.0, lam=0.5)
    assert avg[0].tolist() == pytest.approx([0, .5, .5, 0, .4, .4])
    ns = no_skip_gae(r, v, m, gamma=1.0, lam=0.5)
    assert ns[0].tolist() == pytest.approx([0, 2.41875, 4.4375, 0, .35, .3])


def test_engine_matches_transformers_and_records_its_own_logprobs() -> None:
    """Without mismatch the engine's recorded log-probs equal transformers' teacher-forced ones
    (float32 rounding); with bf16 + logit noise they are the noisy distribution's, not the model's."""
    from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, Mismatch, new_row, play, score_tokens
    from trajstore.trainer.models import load_policy

    codec = CharCodec()
    model = load_policy("tiny-llama", tiny_vocab_size=codec.vocab_size, seed=1).model
    rng = random.Random(0)
    for mismatch, close in ((Mismatch(), True), (Mismatch(bf16=True, logit_noise=0.5), False)):
        rows = [new_row(make_episode("chain", draw_instance(rng)), codec, 3, tag=i) for i in range(6)]
        rec = []
        play(LlamaEngine(model, mismatch), rows, codec, generator=torch.Generator().manual_seed(0),
             on_action=lambda r, a, lp, rep, obs: rec.append((r.tag, len(r.context) - len(a) - len(obs), lp)))
        ref = score_tokens(model, [r.context for r in rows])
        err = max(float((ref[t][s - 1:s - 1 + len(lp)] - torch.tensor(lp)).abs().max()) for t, s, lp in rec)
        assert all(r.done for r in rows) and len(rec) >= 6 * 2
        assert (err < 1e-5) == close, err


def test_a_row_can_start_mid_action() -> None:
    """The oracle restarts episodes inside an action: the context then already ends with the
    action's first tokens, and they are not appended twice."""
    from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, Row, play
    from trajstore.trainer.models import load_policy

    codec = CharCodec()
    model = load_policy("tiny-llama", tiny_vocab_size=codec.vocab_size, seed=2).model
    ep = ChainTask("easy", 3, 4)
    ctx = [codec.bos_token_id] + codec.encode(ep.prompt() + "5")
    row = Row(ep, list(ctx), 3)
    row._action, row._logprobs = [ctx[-1]], [0.0]
    seen = []
    play(LlamaEngine(model), [row], codec, generator=torch.Generator().manual_seed(0), until="action",
         on_action=lambda r, ids, lps, rep, obs: seen.append((ids, obs)))
    (ids, obs), = seen
    assert ep.turn == 1 and ids[0] == ctx[-1] and 2 <= len(ids) <= 3 and len(obs) == 4
    # the context grew by the sampled action tokens and the observation only
    assert row.context == ctx + ids[1:] + obs


def test_auc_bootstrap_and_verdicts_by_hand() -> None:
    # trapezoids: 10 * (.5 + .7) / 2 + 10 * (.7 + .6) / 2 = 12.5 over 20 steps = .625
    assert auc([{"step": 0, "reward": .5}, {"step": 10, "reward": .7}, {"step": 20, "reward": .6}]) == pytest.approx(.625)
    assert math.isnan(auc([{"step": 0, "reward": .5}]))
    iv = bootstrap_interval([-0.1] * 5)
    assert (iv.mean, iv.low, iv.high, iv.excludes_zero()) == (pytest.approx(-0.1), pytest.approx(-0.1),
                                                               pytest.approx(-0.1), -1)
    claim = next(c for c in CLAIMS if c.key == "k2-vs-k1")  # paper: sao beats sao-k1, expect arm - ref < 0
    assert verdict(claim, iv)[0] == "reproduced"
    assert verdict(claim, bootstrap_interval([0.1] * 5))[1].startswith("opposite direction")
    assert verdict(claim, bootstrap_interval([-0.1, 0.1, -0.2, 0.2, 0.0]))[0] == "not reproduced"
    dis = next(c for c in CLAIMS if c.key == "dis-vs-none")
    assert verdict(dis, iv, dis_masked=1e-4)[0] == "not testable at this scale"
    grpo = next(c for c in CLAIMS if c.key == "sao-vs-grpo")
    assert verdict(grpo, bootstrap_interval([0.0, 0.01, -0.01, 0.02, -0.02]))[0] == "not testable at this scale"
    # one seed (the smoke preset): a difference without an interval is no verdict either way
    one = verdict(claim, bootstrap_interval([-0.1]))
    assert one[0] == "undetermined" and one[1].startswith("fewer than 2 paired seeds, no interval")
    assert verdict(dis, bootstrap_interval([0.3]), dis_masked=1e-4)[0] == "undetermined"


def test_no_correction_makes_every_ratio_one() -> None:
    from trajstore.trainer.apps.learning_bench.trainer_side import no_correction_loss
    from trajstore.trainer.sao.losses import dis_policy_loss

    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    rollout = torch.tensor([[-3.0, -2.0, 0.0]])  # ratios e^2, 1, e^-0.5: DIS would mask the first
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones((1, 3), dtype=torch.bool)
    loss, st = no_correction_loss(dis_policy_loss)(lp, rollout, adv, mask, 0.3, 5.0)
    assert float(st.ratio_mean) == 1.0 and float(st.frac_zero_grad) == 0.0
    loss.backward()
    # plain policy gradient of -mean(A * log pi): d/dlp = -A / 3
    assert lp.grad[0].tolist() == pytest.approx([-1 / 3, 1 / 3, -2 / 3])


@pytest.fixture(scope="module")
def tiny_warm_start(tmp_path_factory) -> str:  # noqa: ANN001
    from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig, ensure_warm_start

    return str(ensure_warm_start(tmp_path_factory.mktemp("scratch"), 0, WarmStartConfig(steps=3, batch_episodes=8)))


@pytest.mark.parametrize("arm", ["sao", "gae-turn-avg", "grpo-no-dis"])
def test_a_tiny_run_mixes_versions_inside_trajectories(tmp_path, tiny_warm_start: str, arm: str) -> None:
    """Through the store: each action's version is the one current when it started (so some
    trajectories hold several), the trainer read the batches in completion order (run_one checks
    the stream), and the recorded staleness is trainer version - action version."""
    import duckdb

    from trajstore.trainer.apps.learning_bench.harness import run_one
    from trajstore.trainer.apps.learning_bench.spec import RunSpec

    from trajstore.trainer.apps.learning_bench.trainer_side import train_config

    spec = RunSpec(task="chain", arm=arm, seed=0, warm_start=tiny_warm_start, steps=5, critic_warmup=3,
                   policy_lr=3e-4, batch_size=8, workers=16, eval_every=5, eval_per_family=2, logit_noise=0.2)
    # the timeline publishes nothing for exactly critic_warmup iterations: the trainer's warm-up
    # must not end early on explained variance (its default), or its versions run ahead
    assert train_config(spec, "unused").algo.critic_warmup_until == "budget"
    res = run_one(spec, str(tmp_path / "store"))
    assert [e["step"] for e in res.evals] == [0, 5]
    warmup = 0 if arm.startswith("grpo") else 3  # GRPO has no critic, hence no warm-up
    assert [h["step"] for h in res.history] == [-1] * warmup + [0, 1, 2, 3, 4]
    con = duckdb.connect()
    root = tmp_path / "store"
    mixed = con.execute(f"SELECT count(*) FROM read_parquet('{root}/trajectories/*.parquet') "
                    f"WHERE min_policy_version < max_policy_version").fetchone()[0]
    assert mixed > 0
    stale = con.execute(f"SELECT max(c.staleness_max), min(c.staleness_min) FROM read_parquet('{root}/runs/{spec.run_id}/"
                    f"consumed/*.parquet') c").fetchone()
    assert stale[0] >= 1 and stale[1] >= 0
    assert sum(res.staleness_tokens.values()) == sum(v[0] for v in res.band.values()) > 0
    if arm == "grpo-no-dis":
        groups = con.execute(f"SELECT count(DISTINCT group_id), count(*) FROM read_parquet('{root}/trajectories/*.parquet')"
                         ).fetchone()
        assert groups[1] == 4 * groups[0]


def _checkout_snapshot(root) -> dict[str, tuple[int, int]]:  # noqa: ANN001
    """(size, mtime in ns) of every file of the checkout, virtualenvs, git data and bytecode aside."""
    import os

    snap = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in (".git", ".venv", "__pycache__") and not x.endswith(".egg-info")]
        for f in files:
            st = os.stat(os.path.join(d, f))
            snap[os.path.relpath(os.path.join(d, f), root)] = (st.st_size, st.st_mtime_ns)
    return snap


@pytest.mark.slow
def test_smoke_preset_critic_beats_the_running_mean_and_leaves_the_checkout_alone(tmp_path, monkeypatch) -> None:
    """``traj bench learning --preset smoke`` run from the checkout, as a user would (about 45 s):
    it writes only under the default scratch directory (here the test's temp dir), changes no
    file of the checkout, and shows an SAO mechanism at work: after 40 critic iterations on the
    warm-start policy's data (seed 0), token-level GAE with the critic gives a policy gradient
    much closer to the Monte-Carlo oracle's than reward minus a running mean (cosine margin
    > 0.1; measured 0.63 vs 0.28 when written, and 0.30 / 0.11 / 0.22 margins on seeds 1-3), and
    its per-token advantages correlate better with A*."""
    import json
    import tempfile
    from pathlib import Path

    from typer.testing import CliRunner

    from trajstore.cli.main import app

    repo = REPO_ROOT
    before = _checkout_snapshot(repo)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(repo)
    r = CliRunner().invoke(app, ["bench", "learning", "--preset", "smoke", "--format", "json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)  # --format json: the summary object, indented, alone on stdout
    assert Path(summary["out_dir"]).resolve().is_relative_to(tmp_path.resolve())
    assert (Path(summary["out_dir"]) / "report.md").is_file()
    assert _checkout_snapshot(repo) == before
    q = summary["quality"]["40"]["values"]
    sao = (q["cos"]["sao"]["0"], q["corr"]["sao"]["0"])  # seed "0" (JSON keys)
    rm = (q["cos"]["running-mean-128"]["0"], q["corr"]["running-mean-128"]["0"])
    assert sao[0] > rm[0] + 0.1, (sao, rm)
    assert sao[1] > rm[1], (sao, rm)
    assert summary["runs"]["chain/sao"]["final_eval"] > 0  # the short SAO run went through the pipeline


def test_cli_refuses_bad_options_in_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["bench", "learning", "--arms", "sao,sao2", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --arms" in r.output and "unknown arm 'sao2'" in r.output
    r = runner.invoke(app, ["bench", "learning", "--preset", "full", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --preset: must be default, smoke or calibrate" in r.output
    r = runner.invoke(app, ["bench", "learning", "--seeds", "0,x", "--scratch", str(tmp_path)])
    assert r.exit_code == 2 and "invalid option --seeds: must be comma-separated integers" in r.output
    assert not any(tmp_path.iterdir())  # nothing ran


def test_shift_evaluations_land_on_every_shift_step() -> None:
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig

    cfg = SuiteConfig.preset_config("default", chain_arms=[], shift_arms=["sao"], seeds=[0])
    (spec,) = cfg.specs({0: "unused"})
    assert spec.stages == [(0, "<"), (12, "="), (24, ">")] and spec.steps == 36
    assert all(s % spec.eval_every == 0 for s in cfg.shifts())
    with pytest.raises(ValueError, match="must divide"):
        SuiteConfig.preset_config("default", shift_eval_every=5).specs({s: "x" for s in range(5)})


def test_reanalyse_refuses_a_run_directory_committed_to_git(tmp_path) -> None:
    """Issue 16: the benchmark never writes over committed files. A run directory copied into a
    git checkout and committed is refused by --reanalyse (it would rewrite report.md and the
    figures in place), in one line, with every committed file left as it was."""
    import shutil
    import subprocess

    from typer.testing import CliRunner

    from trajstore.cli.main import app
    from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
    from trajstore.trainer.apps.learning_bench.suite import committed_files

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    run = tmp_path / "repo" / "bench" / "run"
    (run / "results").mkdir(parents=True)
    (run / "config.json").write_text(SuiteConfig.preset_config("smoke").model_dump_json())
    (run / "report.md").write_text("committed report\n")
    git = ["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a run"], check=True)
    assert sorted(committed_files(run)) == ["config.json", "report.md"]
    assert committed_files(tmp_path) == []  # not a work tree
    r = CliRunner().invoke(app, ["bench", "learning", "--reanalyse", str(run)])
    assert r.exit_code == 1, r.output
    assert "refusing to overwrite 2 file(s) committed to git" in r.output and len(r.output.strip().splitlines()) == 1
    assert (run / "report.md").read_text() == "committed report\n"
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "report.md", "results"]


def test_saving_a_warm_start_prints_no_transformers_progress_bar(tmp_path, monkeypatch, capfd):
    # `traj bench learning` printed "Writing model shards: 100%|██████████| 1/1" between its lines
    import transformers

    from trajstore.trainer.apps.learning_bench import warmstart

    tiny = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1))
    monkeypatch.setattr(warmstart, "train_warm_start", lambda seed, cfg: tiny)
    out = warmstart.ensure_warm_start(tmp_path, 0, warmstart.WarmStartConfig(steps=1))
    assert (out / "warmstart.json").is_file()
    captured = capfd.readouterr()
    assert "Writing model shards" not in captured.err + captured.out
