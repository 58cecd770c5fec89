"""``traj proxy``: parse options, run :func:`trajstore.proxy.run_proxy`."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from trajstore.cli.app import TrajTyper
from trajstore.cli.errors import friendly_errors, invalid_options
from trajstore.cli.options import StorageOptions, parse_storage_options
from trajstore.extras import require
from trajstore.http.limits import DEFAULT_MAX_REQUEST_MB
from trajstore.proxy.config import (
    DEFAULT_CLIENT_TOKEN_ENV,
    DEFAULT_FINISH_BATCH_S,
    DEFAULT_FINISH_WAIT_S,
    DEFAULT_UPSTREAM_KEY_ENV,
    GRACEFUL_SHUTDOWN_S,
    ProxyConfig,
)
from trajstore.store import open_store_for_writing

commands = TrajTyper()


@commands.command("proxy")
@friendly_errors
def proxy_cmd(
    store: Annotated[str, typer.Argument(help="store URI the trajectories are written to: local directory or "
                                         "s3://bucket/prefix", show_default=False)],
    upstream: str = typer.Option(..., "--upstream", help="base URL of vLLM / SGLang / traj serve, "
                                                         "e.g. http://127.0.0.1:8000"),
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind (loopback by default)"),
    port: int = typer.Option(8100, "--port", help="TCP port (0 = any free port; the bound one is printed)"),
    engine: str = typer.Option("vllm", "--engine", help="upstream dialect: vllm (also traj serve) | sglang"),
    logprob_mode: str = typer.Option("auto", "--logprob-mode", help="what the upstream's log-probs are: auto "
                                     "(traj serve reports it) | processed (vLLM --logprobs-mode processed_logprobs) "
                                     "| raw (vLLM's default) | tempered (SGLang)"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="tokenizer name recorded (must equal the "
                                                                    "trainer's; default: the response's model)"),
    policy_version: int = typer.Option(0, "--policy-version", min=0, help="version recorded when nothing "
                                                                          "else says"),
    follow_run: str | None = typer.Option(None, "--run", help="training run whose published versions "
                                                                     "the upstream loads (weight sync)"),
    policy_store: str | None = typer.Option(None, "--policy-store", metavar="STORE", help="store the run publishes into "
                                                                         "(default: STORE)"),
    reload_mode: str = typer.Option("drain", "--reload-mode", help="drain (hold new calls, finish in-flight "
                                                                   "ones, then reload) | tag"),
    poll: float = typer.Option(1.0, "--poll-interval", help="seconds between checks for a new version (with "
                               "--max-staleness also between re-reads of the consumed records while an episode "
                               "is held, at most 0.5)"),
    weights_cache: str | None = typer.Option(None, "--weights-cache", help="local folder for versions of a "
                                                                           "remote store"),
    max_staleness: int | None = typer.Option(None, "--max-staleness", min=0, help="AReaL's eta: hold new "
                                             "episodes while running + unconsumed episodes reach "
                                             "(eta + 1) x batch size"),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help="the trainer's batch size "
                                                                           "(default: the run's config.json)"),
    hold_timeout: float = typer.Option(600.0, "--hold-timeout", help="with --max-staleness: a held episode "
                                                                      "is refused (503) after this many seconds"),
    session_timeout: float = typer.Option(600.0, "--session-timeout", help="idle episodes end as aborted "
                                                                           "after this many seconds"),
    upstream_timeout: float = typer.Option(600.0, "--upstream-timeout", help="seconds one upstream call may "
                                                                             "take"),
    finish_wait: float = typer.Option(DEFAULT_FINISH_WAIT_S, "--finish-wait", help="seconds /finish waits for the "
                                      "episode's calls in flight (then: aborted, later answers stored as a "
                                      "continuation part)"),
    finish_batch: float = typer.Option(DEFAULT_FINISH_BATCH_S, "--finish-batch", min=0.0, max=60.0,
                                       help="seconds a /finish waits for other finished episodes to share its shard "
                                       "(it answers once they are durable); 0: write at once"),
    shutdown_grace: float = typer.Option(GRACEFUL_SHUTDOWN_S, "--shutdown-grace", help="after SIGTERM, once open "
                                         "episodes are written: seconds calls in flight may finish before the proxy "
                                         "cuts them"),
    max_request_mb: float = typer.Option(DEFAULT_MAX_REQUEST_MB, "--max-request-mb", help="largest request body (MiB)"),
    upstream_key_env: str = typer.Option(DEFAULT_UPSTREAM_KEY_ENV, "--upstream-key-env",
                                         help="environment variable with the upstream's API key"),
    client_token_env: str = typer.Option(DEFAULT_CLIENT_TOKEN_ENV, "--client-token-env",
                                         help="environment variable with the token clients must send "
                                              "(unset: no client auth)"),
    require_session: bool = typer.Option(False, "--require-session/--no-require-session",
                                         help="refuse calls without a session"),
    redact: bool = typer.Option(False, "--redact/--no-redact", help="scrub secrets and personal data from each "
                                "trajectory before it is stored, as traj redact does (needs --tokenizer)"),
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Record every model call of any OpenAI-compatible harness as trajectories: point its base
    URL at http://HOST:PORT/s/<session>/v1, end episodes with POST /s/<session>/finish."""
    try:
        cfg = ProxyConfig(upstream=upstream, store=store, host=host, port=port, engine=engine, logprob_mode=logprob_mode,
                          tokenizer=tokenizer,
                          policy_version=policy_version, follow_run=follow_run, policy_store=policy_store,
                          reload_mode=reload_mode, poll_s=poll, weights_cache=weights_cache,
                          max_staleness=max_staleness, batch_size=batch_size, hold_timeout_s=hold_timeout,
                          session_timeout_s=session_timeout, finish_wait_s=finish_wait, finish_batch_s=finish_batch,
                          shutdown_grace_s=shutdown_grace,
                          upstream_timeout_s=upstream_timeout, max_request_mb=max_request_mb,
                          upstream_key_env=upstream_key_env, client_token_env=client_token_env,
                          require_session=require_session, redact=redact,
                          storage_options=parse_storage_options(storage_option, store))
    except ValidationError as e:
        raise invalid_options(e) from None
    open_store_for_writing(cfg.store, command="traj proxy", storage_options=cfg.storage_options)  # before the server binds or a shard is written
    require(("fastapi", "uvicorn", "httpx", "orjson"), what="traj proxy", install="pip install 'trajstore[proxy]'")
    from trajstore.proxy.app import run_proxy  # the web extras, imported once they are known to be there

    def ready(h: str, p: int) -> None:
        typer.echo(f"traj proxy: http://{h}:{p}/v1 -> {cfg.upstream}, recording into {store}", err=True)
        typer.echo(f"  harness base URL: http://{h}:{p}/s/<session>/v1", err=True)

    run_proxy(cfg, on_ready=ready)
