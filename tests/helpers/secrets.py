"""Fake but format-valid secrets of every kind ``traj redact`` looks for, and trajectories that
carry them in prompts, observations, tool-call arguments, metadata and raw rewards (SmolLM2's
ChatML, tokenized with SmolLM2's tokenizer). The secrets are assembled from pieces so that this
file itself does not read as a leaked key to a scanner.

:func:`byte_tokenizer_dir` writes a tokenizer whose id of a byte is byte + 4 (ids 0-3 are the
fake upstream's framing ids, :mod:`trajstore.proxy.testing`), for the proxy's tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from trajstore import TrajectoryBuilder
from trajstore.models import Trajectory

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


JWT = ".".join([_b64url(b'{"alg":"HS256","typ":"JWT"}'), _b64url(b'{"sub":"1234567890","name":"Jane Roe"}'),
                _b64url(bytes(range(7, 39)))])
PRIVATE_KEY = ("-----BEGIN RSA " + "PRIVATE KEY-----\n" + "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
               "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
               "-----END RSA " + "PRIVATE KEY-----")

SECRETS: dict[str, str] = {
    "aws_access_key": "AKIA" + "Q3EGRXTW5PL7MNZA",
    "google_api_key": "AIza" + "SyD3xQ9-kLmN0pQrStUvWxYz12345678abc",
    "github_token": "ghp" + "_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
    "slack_token": "xoxb" + "-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe_key": "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "openai_key": "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90" + "T3Blbk" + "FJ" + "Kl12Mn34Op56Qr78St90",
    "jwt": JWT,
    "private_key": PRIVATE_KEY,
    "basic_auth": "s3cr3tPa55w0rd",
    "x_api_key": "4f9c2a7e1b8d3f6a0c5e9b2d7a1f4c8e",
    "email": "jane.doe@acme-robotics.io",
    "api_key": "c0ffee1234deadbeef5678abcdef9012",
}
"""One secret per kind (the text that must disappear: for ``basic_auth`` the password only)."""

assert len(SECRETS["google_api_key"]) == 39 and len(SECRETS["github_token"]) == 40

IM = "<|im_start|>{}\n{}<|im_end|>\n"


def prompt_text() -> str:
    """A system + user prompt holding an AWS key, a Google key and an e-mail address."""
    return (IM.format("system", "You are a coding agent.")
            + IM.format("user", f"Deploy with AWS key {SECRETS['aws_access_key']} and maps key "
                                f"{SECRETS['google_api_key']}; report to {SECRETS['email']} when done.")
            + "<|im_start|>assistant\n")


def action_text() -> str:
    """An assistant turn whose tool call carries a GitHub token in its arguments."""
    args = json.dumps({"command": f"git push https://x-access-token:{SECRETS['github_token']}@github.com/o/r.git"})
    return f'<tool_call>\n{{"name": "bash", "arguments": {args}}}\n</tool_call><|im_end|>'


def observation_text() -> str:
    """A tool observation: an environment dump with a Slack, Stripe, OpenAI token, a JWT, an
    x-api-key header, a basic-auth URL and a private key."""
    body = (f"SLACK_BOT_TOKEN={SECRETS['slack_token']}\nSTRIPE_KEY={SECRETS['stripe_key']}\n"
            f"OPENAI_API_KEY={SECRETS['openai_key']}\nSESSION={SECRETS['jwt']}\n"
            f"curl -H 'x-api-key: {SECRETS['x_api_key']}' https://api.acme-robotics.io/v1\n"
            f"git remote: https://deploy:{SECRETS['basic_auth']}@git.acme-robotics.io/app.git\n"
            f"{SECRETS['private_key']}\n")
    return "\n" + IM.format("tool", body) + "<|im_start|>assistant\n"


def clean_action_text(n: int) -> str:
    return f"Step {n}: I looked at the output and will continue.<|im_end|>"


def secret_trajectory(tok, trajectory_id: str = "sec-1", *, metadata: dict | None = None) -> Trajectory:
    """prompt (AWS, Google, e-mail) | action 1 (clean) | observation (Slack, Stripe, OpenAI, JWT,
    x-api-key, basic auth, private key) | action 2 (GitHub token in a tool call) | observation
    (clean) | action 3 (clean); metadata with an ``api_key`` and an e-mail; reward_raw with an
    e-mail. Action log-probs are -0.01 * (1 + index of the token in its action)."""
    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    def lps(n: int) -> list[float]:
        return [-0.01 * (i + 1) for i in range(n)]

    b = TrajectoryBuilder(trajectory_id=trajectory_id, tokenizer=SMOL, model="smol", metadata=metadata if metadata
                          is not None else {"llm_config": {"model": "gpt-x", "api_key": SECRETS["api_key"]},
                                            "user": {"email": SECRETS["email"]}, "task": "deploy"})
    b.add_prompt(ids(prompt_text()), role="user")
    for k, text in enumerate([clean_action_text(1), observation_text(), action_text(),
                              "\n" + IM.format("tool", "ok") + "<|im_start|>assistant\n", clean_action_text(3)]):
        t = ids(text)
        if k % 2 == 0:
            b.add_action(t, lps(len(t)), policy_version=2, call_id=f"c{k}")
        else:
            b.add_observation(t, cause_id=f"c{k - 1}")
    b.set_reward(1.0, raw={"passed": True, "reviewer": SECRETS["email"]})
    return b.finish()


def clean_trajectory(tok, trajectory_id: str) -> Trajectory:
    """A trajectory without secrets (prompt, action, observation, action)."""
    b = TrajectoryBuilder(trajectory_id=trajectory_id, tokenizer=SMOL, model="smol", metadata={"task": "sort"})
    b.add_prompt(tok.encode(IM.format("user", "Sort the list [3, 1, 2].") + "<|im_start|>assistant\n",
                            add_special_tokens=False))
    for k, text in enumerate([clean_action_text(1), "\n" + IM.format("tool", "[1, 2, 3]") +
                              "<|im_start|>assistant\n", clean_action_text(2)]):
        t = tok.encode(text, add_special_tokens=False)
        if k % 2 == 0:
            b.add_action(t, [-0.5] * len(t), policy_version=1)
        else:
            b.add_observation(t)
    b.set_reward(0.0)
    return b.finish()


def span_texts(tok, tokens, spans) -> list[str]:
    """Each span's tokens decoded (special tokens kept)."""
    tokens = np.asarray(tokens)
    return [tok.decode(tokens[s["start"]:s["end"]].tolist() if isinstance(s, dict) else
                       tokens[s.start:s.end].tolist(), skip_special_tokens=False) for s in spans]


def byte_tokenizer_dir(path: Path) -> str:
    """A Hugging Face tokenizer folder whose id of byte b is b + 4 (byte-level, no merges); ids
    0-3 are special. Returns the folder (a name for ``load_tokenizer``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from trajstore.redact.tokentext import _byte_decoder

    vocab = {"<eot>": 0, "<msg>": 1, "<sep>": 2, "<gen>": 3}
    vocab.update({c: b + 4 for c, b in _byte_decoder().items()})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(str(path))
    return str(path)
