"""The typed options of ``traj proxy``."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trajstore.http.limits import DEFAULT_MAX_REQUEST_MB
from trajstore.proxy.logprob_mode import LogprobModeOption
from trajstore.proxy.upstream import UpstreamDialect

DEFAULT_UPSTREAM_KEY_ENV = "TRAJ_UPSTREAM_API_KEY"
DEFAULT_CLIENT_TOKEN_ENV = "TRAJ_PROXY_TOKEN"


GRACEFUL_SHUTDOWN_S = 30.0
"""Default ``--shutdown-grace`` (s): after SIGTERM / SIGINT the proxy writes open episodes as
``aborted`` at once, then lets the calls in flight finish for this long and cuts the rest; a
supervisor that waits about this long plus half a minute never kills it mid-write (the proxy
logs ``shutdown: flushed ...`` once nothing recorded can be lost any more)."""

DEFAULT_FINISH_WAIT_S = 60.0
"""Default ``--finish-wait`` (s)."""


DEFAULT_FINISH_BATCH_S = 0.5
"""Default ``--finish-batch`` (s)."""


class ProxyConfig(BaseModel):
    """Everything ``traj proxy`` needs; secrets are never fields, only the names of the
    environment variables that hold them."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(description="base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000 "
                                      "(with or without a trailing /v1)")
    store: str = Field(description="store URI the trajectories are written to")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options of the store and "
                                            "of the policy store (an S3 endpoint, keys)")
    host: str = Field("127.0.0.1", description="interface to bind (loopback by default)")
    port: int = Field(8100, ge=0, le=65535, description="TCP port (0 = any free port)")
    engine: UpstreamDialect = Field("vllm", description="the upstream's request/response dialect "
                                                                  "(traj serve speaks vllm)")
    logprob_mode: LogprobModeOption = Field("auto", description="what the upstream's log-probs are, recorded on "
                                            "every action span: auto = what it reports (traj serve); vLLM: raw (its "
                                            "default) or processed (--logprobs-mode processed_logprobs); SGLang: "
                                            "tempered (docs/sampling.md)")
    tokenizer: str | None = Field(None, description="tokenizer name recorded with every trajectory (must equal "
                                                    "the trainer's; default: the response's model name)")
    policy_version: int = Field(0, ge=0, description="version recorded when nothing says otherwise (the upstream's "
                                "answers, weight sync, the model path it serves, POST /proxy/policy_version)")
    session_timeout_s: float = Field(600.0, gt=0, description="an episode without a call for this long ends "
                                                              "as aborted (s)")
    upstream_timeout_s: float = Field(600.0, gt=0, description="one upstream call may take this long (s)")
    finish_wait_s: float = Field(DEFAULT_FINISH_WAIT_S, ge=0, description="/finish waits this long for the "
                                 "episode's calls in flight; if they do not end, the episode ends aborted and "
                                 "each later answer is stored as a continuation part (s)")
    finish_batch_s: float = Field(DEFAULT_FINISH_BATCH_S, ge=0, le=60, description="finished episodes are "
                                  "written together: a /finish waits up to this long for others to share its "
                                  "shard (fewer, larger shards), and answers once they are durable; 0 = at once (s)")
    shutdown_grace_s: float = Field(GRACEFUL_SHUTDOWN_S, ge=0, description="after SIGTERM / SIGINT, once open "
                                    "episodes are written, calls in flight may finish for this long before the "
                                    "proxy cuts them with an error (s)")
    max_request_mb: float = Field(DEFAULT_MAX_REQUEST_MB, gt=0, description="largest accepted request body (MiB)")
    upstream_key_env: str = Field(DEFAULT_UPSTREAM_KEY_ENV, description="environment variable holding the "
                                  "upstream's API key (sent as a bearer token; never logged or stored)")
    client_token_env: str = Field(DEFAULT_CLIENT_TOKEN_ENV, description="environment variable holding the token "
                                  "clients must send as 'Authorization: Bearer ...'; unset = no client auth")
    redact: bool = Field(False, description="scrub secrets and personal data from each trajectory before it is "
                         "stored (traj redact's built-in rules; needs --tokenizer)")
    require_session: bool = Field(False, description="refuse calls without a session key (otherwise each is "
                                                     "recorded as a one-call trajectory)")
    follow_run: str | None = Field(None, description="training run whose published versions the upstream loads")
    policy_store: str | None = Field(None, description="store the run publishes into (default: the store recorded into)")
    reload_mode: Literal["drain", "tag"] = Field("drain", description="drain: hold new calls and let in-flight "
                                                 "ones finish before a reload; tag: no waiting, label each call "
                                                 "from what the upstream reports")
    poll_s: float = Field(1.0, gt=0, description="seconds between checks for a new version: a published one "
                          "(--run), else the model path the upstream serves (GET /v1/models); with "
                          "--max-staleness also between re-reads of the trainer's consumed records while an "
                          "episode is held (at most 0.5)")
    drain_timeout_s: float = Field(600.0, gt=0, description="longest wait for in-flight calls before a reload (s)")
    weights_cache: str | None = Field(None, description="local folder for copies of versions from a remote "
                                                        "store (the upstream must be able to read it)")
    max_staleness: int | None = Field(None, ge=0, description="AReaL's eta: hold new episodes while running + "
                                      "unconsumed episodes reach (eta + 1) x batch size (needs --run)")
    batch_size: int | None = Field(None, ge=1, description="the trainer's trajectories per step (default: the "
                                                           "run's config.json)")
    hold_timeout_s: float = Field(600.0, gt=0, description="a held episode is refused with 503 after this (s)")

    @field_validator("upstream")
    @classmethod
    def _base(cls, v: str) -> str:
        v = v.rstrip("/")
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"upstream must be an http(s) URL, got {v!r}")
        return v.removesuffix("/v1")

    def client_token(self) -> str | None:
        """The token clients must send (the value of ``client_token_env``), or None: no client auth."""
        return os.environ.get(self.client_token_env) or None
