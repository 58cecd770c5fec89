"""``traj proxy --redact``: what a harness sends is scrubbed before it is stored (the fake upstream's
ids are byte + 4, so the tokenizer of tests.helpers.secrets.byte_tokenizer_dir reads them)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers.secrets import SECRETS, byte_tokenizer_dir
from trajstore.errors import TrajstoreError
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.state import redactor_for
from trajstore.proxy.testing import render
from trajstore.reader import read_trajectories
from trajstore.validation import validate_files


def test_a_secret_the_harness_sends_is_never_stored(fake_upstream, start_proxy, tmp_path):
    tok = byte_tokenizer_dir(tmp_path / "tok")
    px = start_proxy(fake_upstream.url, tokenizer=tok, redact=True)
    content = f"deploy with {SECRETS['aws_access_key']} and mail {SECRETS['email']}"
    r = httpx.post(f"{px.url}/s/red/v1/chat/completions", timeout=30,
                   json={"model": "fake", "messages": [{"role": "user", "content": content}]})
    r.raise_for_status()
    httpx.post(f"{px.url}/s/red/finish", json={"reward": 1.0}, timeout=30).raise_for_status()
    (row,) = read_trajectories(str(tmp_path / "store")).to_pylist()
    expected = render([{"role": "user", "content": "deploy with [REDACTED:aws_access_key] and mail [REDACTED:email]"}])
    assert row["tokens"][:len(expected)] == expected
    assert row["spans"][0]["end"] == len(expected)  # the prompt span ends where the marker-shortened prompt does
    raw = bytes(t - 4 for t in row["tokens"] if t >= 4)
    assert SECRETS["aws_access_key"].encode() not in raw and SECRETS["email"].encode() not in raw
    meta = json.loads(row["metadata"])
    assert [c["kind"] for c in meta["redaction"]["changes"]] == ["aws_access_key", "email"]
    assert not row["trainable"] and "context of 1 action(s) changed" in row["not_trainable_reason"]
    assert validate_files([str(tmp_path / "store")]).ok


def test_redact_needs_a_tokenizer_that_loads(tmp_path):
    with pytest.raises(TrajstoreError, match="--redact needs --tokenizer"):
        redactor_for(ProxyConfig(upstream="http://127.0.0.1:1", store=str(tmp_path / "s"), redact=True))
    with pytest.raises(TrajstoreError, match="--redact: tokenizer"):
        redactor_for(ProxyConfig(upstream="http://127.0.0.1:1", store=str(tmp_path / "s"), redact=True,
                                 tokenizer=str(tmp_path / "missing")))
    assert redactor_for(ProxyConfig(upstream="http://127.0.0.1:1", store=str(tmp_path / "s"))) is None
