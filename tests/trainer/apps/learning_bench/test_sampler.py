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
