"""The demo's agent: one guess-the-number episode played through ``traj proxy`` with the official
``openai`` client, ended with the proxy's ``/finish`` and its reward."""

from __future__ import annotations

import time
from typing import Any

from trajstore.trainer.apps.envs.guess_chat import EpisodeSummary, GuessNumberEnv


def play_episode(base_url: str, env: GuessNumberEnv, *, model: str, max_new_tokens: int,
                 metadata: dict[str, Any]) -> EpisodeSummary:
    """One guess-the-number episode by an agent written against the official ``openai`` client,
    whose only setting is the base URL (``.../s/<session>/v1`` of ``traj proxy``; the key is a
    placeholder the client insists on). The proxy records the calls; the agent ends the episode
    with ``POST .../s/<session>/finish`` and its reward.

    Raises:
        openai.APIError: a call failed (the proxy then records the episode as failed or aborted).
    """
    import httpx  # the proxy and train extras: loaded when an episode is played, not with the CLI
    import openai

    t0 = time.perf_counter()
    client = openai.OpenAI(base_url=base_url, api_key="unused")
    messages: list[dict[str, str]] = [dict(m) for m in env.reset()]
    while True:
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=max_new_tokens,
                                           temperature=1.0, top_p=1.0)
        text = r.choices[0].message.content or ""
        reply = env.step(text)
        if reply.done:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": reply.text}]
    raw = {"reward": reply.reward, "solved": reply.reward == 1.0, "guesses": env.guesses, "verdict": reply.text}
    done = httpx.post(base_url.removesuffix("/v1") + "/finish", timeout=120, json={
        "status": "completed", "reward": reply.reward, "reward_raw": raw, "prompt_id": env.prompt_id,
        "metadata": {**metadata, "env": "guess-number", "target": env.target, "low": env.low, "high": env.high,
                     "max_turns": env.max_turns}}).json()
    ids = done.get("trajectories") or ["?"]
    return EpisodeSummary(ids[0], env.prompt_id, float(reply.reward or 0.0), reply.reward == 1.0,
                          len(done.get("policy_versions") or []), list(done.get("policy_versions") or []),
                          int(done.get("num_tokens") or 0), time.perf_counter() - t0)
