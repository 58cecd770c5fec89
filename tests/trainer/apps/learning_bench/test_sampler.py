"""trainer/apps/learning_bench/sampler.py: the engine matches transformers and records its own
log-probs; a row can start mid-action."""

from __future__ import annotations

import random

import torch

from trajstore.trainer.apps.envs import ChainTask, draw_instance, make_episode
from trajstore.trainer.apps.learning_bench.codec import CharCodec


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
             on_action=lambda r, a, lp, rep, obs, rec=rec: rec.append((r.tag, len(r.context) - len(a) - len(obs), lp)))
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


def _log_ratios(model, mismatch, episodes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """(log pi_trainer - log mu_engine, pi_trainer) of every sampled action token of `episodes` episodes."""
    from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, new_row, play, score_tokens

    codec = CharCodec()
    rng = random.Random(seed)
    rows = [new_row(make_episode("chain", draw_instance(rng)), codec, 3, tag=i) for i in range(episodes)]
    rec = []
    play(LlamaEngine(model, mismatch), rows, codec, generator=torch.Generator().manual_seed(seed),
         on_action=lambda r, a, lp, rep, obs, rec=rec: rec.append((r.tag, len(r.context) - len(a) - len(obs), lp)))
    ref = score_tokens(model, [r.context for r in rows])
    trainer = torch.cat([ref[t][s - 1:s - 1 + len(lp)] for t, s, lp in rec])
    engine = torch.cat([torch.tensor(lp) for _, _, lp in rec])
    return trainer - engine, trainer.exp()


def test_engine_like_mismatch_is_heavy_tailed_systematic_and_largest_on_unlikely_tokens() -> None:
    """Learning bench preset v2: the injected mismatch was unbiased light-tailed Gaussian noise. The ``engine``
    model (float8 LM head + Student-t logit noise) at the same scale puts far more tokens beyond
    0.75 nats of log-ratio, its sampled tokens' log-ratios are biased below 0 (a token is sampled
    partly because its noise was high), most for tokens the trainer finds unlikely; at zero
    noise the float8 head alone is a fixed error beyond bf16's."""
    from trajstore.trainer.apps.learning_bench.sampler import Mismatch
    from trajstore.trainer.models import load_policy

    codec = CharCodec()
    model = load_policy("tiny-llama", tiny_vocab_size=codec.vocab_size, seed=1).model
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # peaked distributions, as a trained policy's
    gauss, _ = _log_ratios(model, Mismatch(bf16=True, logit_noise=0.3), 32)
    eng, p = _log_ratios(model, Mismatch.engine_like(0.3), 32)
    tail_g, tail_e = float((gauss.abs() > 0.75).float().mean()), float((eng.abs() > 0.75).float().mean())
    assert tail_e > 4 * tail_g and tail_e > 0.02, (tail_g, tail_e)  # measured 0.4 % vs 5.1 %
    assert float(eng.mean()) < 2 * float(gauss.mean()) < 0  # measured -0.046 vs -0.012 nats
    low, high = eng[p < 0.2], eng[p > 0.8]
    assert len(low) > 20 and len(high) > 20
    assert float(low.abs().mean()) > 3 * float(high.abs().mean()) and float(low.mean()) < float(high.mean())
    bf16, _ = _log_ratios(model, Mismatch(bf16=True), 12)
    fp8, _ = _log_ratios(model, Mismatch(bf16=True, head_fp8=True), 12)
    assert float(fp8.abs().mean()) > 2 * float(bf16.abs().mean()) > 0
