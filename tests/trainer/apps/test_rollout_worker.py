"""trainer/apps/rollout_worker.py: the sampler's log-probs, and a worker run on a tiny random model
whose stored engine log-probs match a recomputation at the same weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


# -- the real tokenizer -------------------------------------------------------------------------


# -- sampler ------------------------------------------------------------------------------------


def test_sampling_logprobs_top_p_hand_case():
    from trajstore.trainer.apps.rollout_worker import sampling_logprobs

    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    lp = sampling_logprobs(probs.log(), temperature=1.0, top_p=0.7)
    # sorted 0.5, 0.3, 0.15, 0.05: mass before each = 0, 0.5, 0.8, 0.95 -> keep the first two,
    # renormalised: 0.5/0.8 = 0.625, 0.3/0.8 = 0.375
    assert torch.allclose(lp.exp(), torch.tensor([0.0, 0.625, 0.0, 0.375]), atol=1e-6)
    same = sampling_logprobs(probs.log(), temperature=1.0, top_p=1.0)
    assert torch.allclose(same, probs.log(), atol=1e-6)
    hot = sampling_logprobs(probs.log(), temperature=2.0, top_p=1.0)
    # T = 2: p_i proportional to sqrt(p_i)
    assert torch.allclose(hot.exp(), probs.sqrt() / probs.sqrt().sum(), atol=1e-6)


def tiny_policy(seed: int, vocab: int):
    from trajstore.trainer.models import load_policy

    return load_policy("tiny-llama", tiny_vocab_size=vocab, seed=seed).model


def recompute_logprobs(model, tokens: np.ndarray) -> np.ndarray:
    """log p(tokens[t] | tokens[:t]) from one full forward pass (no cache), nats; [0] = nan."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(tokens[None], dtype=torch.long), use_cache=False).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(tokens[1:, None], dtype=torch.long))[:, 0]
    return np.concatenate([[np.nan], lp.numpy()])


def _untruncated(L: int):  # noqa: ANN202
    """Temperature 1 without truncation for L predicted tokens, as (1, L) tensors."""
    from trajstore.sampling import SamplingArrays, no_truncation

    return SamplingArrays(*(torch.as_tensor(x)[None] for x in no_truncation(L)))


def trainer_logprobs(model, tokens: np.ndarray) -> np.ndarray:
    """The same quantity through the trainer's PolicyLogprobs (temperature 1); [0] = nan."""
    from trajstore.trainer.models import PolicyLogprobs

    ids = torch.tensor(tokens[None], dtype=torch.long)
    L = ids.shape[1] - 1
    with torch.no_grad():
        lp, _ = PolicyLogprobs(model)(ids[:, :-1], torch.arange(L)[None], ids[:, 1:], _untruncated(L))
    return np.concatenate([[np.nan], lp[0].numpy()])


def test_sample_action_stops_and_limits():
    from trajstore.trainer.apps.rollout_worker import SamplingConfig, sample_action

    model = tiny_policy(0, 64)
    g = torch.Generator().manual_seed(0)
    a = sample_action(model, [1, 2, 3], sampling=SamplingConfig(max_new_tokens=5), stop_token_ids=[], generator=g)
    assert (len(a.token_ids), a.finish_reason) == (5, "length")
    b = sample_action(model, [1, 2, 3], sampling=SamplingConfig(max_new_tokens=5), stop_token_ids=range(64),
                      generator=g)
    assert (len(b.token_ids), b.finish_reason) == (1, "stop")
    ctx = [1, 2, 3]
    full = recompute_logprobs(model, np.array(ctx + a.token_ids))
    np.testing.assert_allclose(a.logprobs, full[len(ctx):], atol=1e-5)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)


def test_batched_sampling_matches_each_rows_own_recomputation():
    """Left padding must not leak: each row's captured log-probs equal a padding-free full
    forward over that row's own context + action (contexts of different lengths)."""
    from trajstore.trainer.apps.rollout_worker import SamplingConfig, sample_actions

    model = tiny_policy(0, 64)
    contexts = [[5], list(range(1, 12)), [7, 8, 9, 10]]
    acts = sample_actions(model, contexts, sampling=SamplingConfig(max_new_tokens=6), stop_token_ids=[3],
                          generator=torch.Generator().manual_seed(1))
    assert len(acts) == 3
    for ctx, a in zip(contexts, acts):
        assert 1 <= len(a.token_ids) <= 6 and (a.finish_reason == "stop") == (a.token_ids[-1] == 3)
        assert 3 not in a.token_ids[:-1]  # a row stops at its first stop token
        full = recompute_logprobs(model, np.array(ctx + a.token_ids))
        np.testing.assert_allclose(a.logprobs, full[len(ctx):], atol=1e-5)


# -- the worker ---------------------------------------------------------------------------------


def test_worker_writes_valid_trajectories_and_follows_published_versions(tmp_store, smol_tokenizer):
    from trajstore.reader import read_trajectories
    from trajstore.trainer.apps.rollout_worker import RolloutWorker, SamplingConfig
    from trajstore.trainer.loop.publish import publish_policy
    from trajstore.writer import StoreWriter

    vocab = len(smol_tokenizer)
    worker_model = tiny_policy(0, vocab)
    worker = RolloutWorker(worker_model, smol_tokenizer, tmp_store, run_id="r", model_name="tiny-llama",
                           tokenizer_name="HuggingFaceTB/SmolLM2-135M-Instruct",
                           sampling=SamplingConfig(max_new_tokens=6), seed=3, env_kwargs={"max_turns": 3},
                           parallel_episodes=2)
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        first = worker.run(2, w)
        trainer_model = tiny_policy(1, vocab)  # stands in for updated weights
        publish_policy(tmp_store, "r", 1, trainer_model)
        second = worker.run(1, w)
    assert [s.policy_versions for s in first] == [[0, 0, 0]] * 2  # random models never guess right
    assert second[0].policy_versions == [1, 1, 1] and worker.version == 1

    table = read_trajectories(tmp_store)
    assert table.num_rows == 3
    rows = {r["trajectory_id"]: r for r in table.to_pylist()}
    weights = {0: tiny_policy(0, vocab), 1: trainer_model}
    for s in [*first, *second]:
        r = rows[s.trajectory_id]
        assert (r["logprob_source"], r["token_source"], r["tokenizer"], r["source"]) == (
            "engine", "engine", "HuggingFaceTB/SmolLM2-135M-Instruct", "trajstore/rollout-worker")
        assert r["reward"] == s.reward and 0.0 <= r["reward"] <= 0.5
        kinds = [sp["kind"] for sp in r["spans"]]
        assert kinds == ["prompt", "action", "observation", "action", "observation", "action"]
        tokens = np.array(r["tokens"])
        # the stored tokens are the rendered conversation the model conditioned on
        assert smol_tokenizer.decode(tokens[: r["spans"][1]["start"]]).endswith("<|im_start|>assistant\n")
        for sp in r["spans"][2::2]:
            text = smol_tokenizer.decode(tokens[sp["start"]:sp["end"]])
            assert "<|im_start|>user\n" in text and text.endswith("<|im_start|>assistant\n")
        recomputed = recompute_logprobs(weights[s.policy_versions[0]], tokens)
        action = np.zeros(len(tokens), bool)
        for sp in r["spans"]:
            if sp["kind"] == "action":
                action[sp["start"]:sp["end"]] = True
                assert (sp["policy_version"], sp["temperature"], sp["top_p"], sp["top_k"], sp["max_tokens"],
                        sp["logprob_mode"]) == (s.policy_versions[0], 1.0, 1.0, -1, 6, "processed")
        # schema v2 stores one log-prob per action token, in order: spread back to full length
        assert len(r["action_logprobs"]) == int(action.sum())
        stored = np.full(len(tokens), np.nan)
        stored[action] = r["action_logprobs"]
        # at unchanged weights the trainer-side log-prob equals the captured one: both a plain
        # full forward and the trainer's own PolicyLogprobs module (chunked, temperature-scaled)
        np.testing.assert_allclose(stored[action], recomputed[action], atol=1e-4)
        np.testing.assert_allclose(stored[action], trainer_logprobs(weights[s.policy_versions[0]], tokens)[action],
                                   atol=1e-4)
        assert not math.isnan(recomputed[action].sum())


def test_trajectory_crosses_versions_with_sync_every_action(tmp_store, smol_tokenizer):
    """With per-action syncing, a version published mid-episode is used from the next action on,
    and each action span records the version that generated it."""
    from trajstore.trainer.apps.envs.guess_chat import GuessNumberEnv
    from trajstore.trainer.apps.rollout_worker import RolloutWorker, SamplingConfig
    from trajstore.trainer.loop.publish import publish_policy

    vocab = len(smol_tokenizer)
    newer = tiny_policy(1, vocab)

    class PublishingDuringEpisode(RolloutWorker):
        """The first sync (before the second action) finds a trainer has just published v1."""

        def sync_policy(self) -> bool:
            if not self.loads:
                publish_policy(tmp_store, "r", 1, newer)
            return super().sync_policy()

    w = PublishingDuringEpisode(tiny_policy(0, vocab), smol_tokenizer, tmp_store, run_id="r", model_name="tiny",
                                tokenizer_name="tok", sampling=SamplingConfig(max_new_tokens=3),
                                sync_every_action=True, extra_metadata={"demo_run": "x"})
    traj, summary = w.run_episode(GuessNumberEnv(target=3, max_turns=3))
    assert summary.policy_versions == [0, 1, 1]
    assert [s.policy_version for s in traj.spans if s.kind == "action"] == [0, 1, 1]
    assert traj.metadata["demo_run"] == "x" and traj.metadata["target"] == 3
    # the v1 actions' log-probs are v1's: recompute them at v1 weights
    tokens = np.asarray(traj.tokens)
    recomputed = recompute_logprobs(newer, tokens)
    for sp in traj.spans:
        if sp.kind == "action" and sp.policy_version == 1:
            np.testing.assert_allclose(np.asarray(traj.action_logprobs)[sp.start:sp.end], recomputed[sp.start:sp.end],
                                       atol=1e-4)
