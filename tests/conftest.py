"""Shared pytest fixtures for the whole suite (owned by the store tests; keep them stable).

Fixtures:
    moto_endpoint       session: a moto S3 server (``ThreadedMotoServer``) on 127.0.0.1 at a
                        free port; its ``http://127.0.0.1:PORT`` URL. Sets AWS_DEFAULT_REGION and
                        dummy credentials in the environment (child processes inherit them).
    s3_storage_options  s3fs options for that server: {"key", "secret", "endpoint_url"}.
    s3_store_uri        (uri, storage_options) for a fresh, empty bucket per test:
                        ``("s3://<bucket>/store", {...})``. Pass both to ``open_store``.
    tmp_store           a fresh local store path (str, not yet created) under ``tmp_path``.
    make_trajectory     the :func:`random_trajectory` factory below, for tests that build data.
    fixtures_dir        ``<repo>/../shared/fixtures`` (read-only real data; never copy it). A
                        plain clone has no ``../shared``: tests that take this fixture skip,
                        naming the path they looked for (:data:`MISSING_SHARED`).

Helpers (plain functions, importable nowhere else: use the ``make_trajectory`` fixture):
    random_trajectory   a valid schema-v1 :class:`trajstore.Trajectory` with a random span layout.

DuckDB reads the moto bucket through ``conn.register_filesystem(s3fs.S3FileSystem(**opts))``.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trajstore.models import SamplingParams, Span, Trajectory

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
MISSING_SHARED = (f"needs the real harness logs in {SHARED_FIXTURES} (the shared/ folder beside the checkout, "
                  "as CI has it); a plain clone has none")
"""Skip reason of every test that reads ``../shared``."""

MOTO_KEY = "testing"
MOTO_SECRET = "testing"
MOTO_REGION = "us-east-1"

VOCAB_SIZE = 49_152
"""Token ids are drawn from [0, VOCAB_SIZE) (SmolLM2's vocabulary size)."""


# -- S3 (moto server) ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server running in this process for the whole session.

    s3fs talks HTTP, so in-process ``mock_aws`` would not intercept it; the threaded server
    does, and spawned child processes reach it too.
    """
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in ("AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_DEFAULT_REGION"] = MOTO_REGION
    os.environ["AWS_ACCESS_KEY_ID"] = MOTO_KEY
    os.environ["AWS_SECRET_ACCESS_KEY"] = MOTO_SECRET
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_storage_options(moto_endpoint: str) -> dict[str, Any]:
    """s3fs storage_options for the moto server (a new dict per test; mutate freely)."""
    return {"key": MOTO_KEY, "secret": MOTO_SECRET, "endpoint_url": moto_endpoint}


@pytest.fixture
def s3_store_uri(s3_storage_options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(uri, storage_options) of an empty store in a bucket created for this test only."""
    import s3fs

    bucket = f"test-{uuid.uuid4().hex[:16]}"
    fs = s3fs.S3FileSystem(**s3_storage_options)
    fs.mkdir(bucket)
    return f"s3://{bucket}/store", dict(s3_storage_options)


# -- local store and shared data -------------------------------------------------------------


@pytest.fixture
def tmp_store(tmp_path: Path) -> str:
    """Path (str) of a fresh local store; the directory is created by the first write."""
    return str(tmp_path / "store")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The read-only real fixtures (``../shared/fixtures`` next to the repo root)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(MISSING_SHARED)
    return SHARED_FIXTURES.resolve()


# -- random valid trajectories ---------------------------------------------------------------


def random_trajectory(
    rng: np.random.Generator,
    *,
    trajectory_id: str | None = None,
    num_turns: int | None = None,
    max_span_tokens: int = 64,
    with_logprobs: bool = True,
    with_actions: bool = True,
    reward: float | None | str = "random",
    group_id: str | None = None,
) -> Trajectory:
    """A valid schema-v1 trajectory with a random span layout.

    Layout: one prompt span, then `num_turns` (random 1-6 when None) action spans, each
    followed by an observation span except possibly the last (random). Span lengths are
    uniform in [1, max_span_tokens]. Action spans get policy versions that grow over the
    trajectory (a trajectory can cross versions), a random finish reason and sampling params.

    Args:
        rng: the random source (use ``np.random.default_rng(seed)`` for reproducible data).
        trajectory_id: defaults to ``traj-<random hex>``.
        with_logprobs: engine log-probs (<= 0, nats) on every action token; else every
            log-prob is null and ``logprob_source='none'`` (action spans then may lack a version).
        with_actions: False gives a prompt + observation trajectory (stored, not trainable).
        reward: a float or None as given; ``"random"`` (default) draws a float or, 1 in 5, None.
        group_id: stored as given.

    Returns:
        A :class:`trajstore.Trajectory` that passes :func:`trajstore.validate.validate_trajectory`.
    """
    tid = trajectory_id or f"traj-{rng.integers(2**63):016x}"
    turns = int(rng.integers(1, 7)) if num_turns is None else num_turns
    tokens: list[np.ndarray] = []
    logprobs: list[np.ndarray] = []
    spans: list[Span] = []
    pos = 0
    version = int(rng.integers(0, 50))

    def add(kind: str, n: int, **extra: Any) -> None:
        nonlocal pos
        tokens.append(rng.integers(0, VOCAB_SIZE, size=n, dtype=np.int32))
        if kind == "action" and with_logprobs:
            logprobs.append((-rng.exponential(1.0, size=n)).astype(np.float32))
        else:
            logprobs.append(np.full(n, np.nan, dtype=np.float32))
        spans.append(Span(kind=kind, start=pos, end=pos + n, **extra))
        pos += n

    add("prompt", int(rng.integers(1, max_span_tokens + 1)), role="user")
    for turn in range(turns):
        if with_actions:
            version += int(rng.integers(0, 2))
            sp = SamplingParams(temperature=float(rng.choice([0.6, 1.0])), top_p=float(rng.choice([0.95, 1.0])),
                                top_k=int(rng.choice([-1, 50])), max_tokens=int(rng.integers(256, 4096)))
            add("action", int(rng.integers(1, max_span_tokens + 1)), role="assistant",
                policy_version=version if with_logprobs or rng.random() < 0.5 else None,
                call_id=f"call-{turn}", finish_reason=str(rng.choice(["stop", "length", "tool_calls"])),
                temperature=sp.temperature, top_p=sp.top_p, top_k=sp.top_k, max_tokens=sp.max_tokens,
                sampling_params=sp.to_json(), tool_call_ids=[f"tc-{turn}"])
        if not with_actions or turn < turns - 1 or rng.random() < 0.5:
            add("observation", int(rng.integers(1, max_span_tokens + 1)), role="tool",
                cause_id=f"tc-{turn}", truncated=bool(rng.random() < 0.1))
    if reward == "random":
        reward = None if rng.random() < 0.2 else float(rng.normal())
    created = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=int(rng.integers(0, 10**12)))
    return Trajectory(
        trajectory_id=tid,
        prompt_id=f"prompt-{rng.integers(1000)}",
        group_id=group_id,
        source="sdk",
        model="test-policy",
        tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct",
        created_at=created,
        status=str(rng.choice(["completed", "truncated", "aborted", "failed"])),
        reward=reward,
        reward_raw=None if reward is None else f"{reward!r}",
        token_source="engine",
        logprob_source="engine" if with_logprobs else "none",
        tokens=np.concatenate(tokens),
        logprobs=np.concatenate(logprobs),
        spans=spans,
        metadata={"seed_turns": turns, "tags": ["test", str(rng.integers(10))], "nested": {"x": 1.5}},
    )


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    """:func:`random_trajectory` (signature ``(rng, *, trajectory_id=None, num_turns=None,
    max_span_tokens=64, with_logprobs=True, with_actions=True, reward="random", group_id=None)``)."""
    return random_trajectory
