"""``traj serve``: parse options, run :func:`trajstore.trainer.serving.serve.run_serve`."""

from __future__ import annotations

import typer
from pydantic import ValidationError

from trajstore.cli.app import TrajTyper
from trajstore.cli.errors import EXIT_INTERRUPTED, friendly_errors, invalid_options
from trajstore.extras import INSTALL_TRAIN_EXTRA, require
from trajstore.trainer.serving.config import ServeConfig

commands = TrajTyper()


@commands.command("serve")
@friendly_errors
def serve_cmd(
    model: str = typer.Option("smollm2-135m", "--model", help="smollm2-135m, a local HF directory, a .gguf "
                                                              "file, or tiny-llama (random weights, tests)"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="tokenizer (default: the model's)"),
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind (loopback by default)"),
    port: int = typer.Option(8000, "--port", help="TCP port (0 = any free port; the bound one is printed)"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | cuda:N"),
    dtype: str = typer.Option("auto", "--dtype", help="auto | float32 | bfloat16 | float16"),
    max_batch_size: int = typer.Option(16, "--max-batch-size", min=1, help="requests sampled together at most"),
    weight_version: str = typer.Option("0", "--weight-version", help="weight version until the first reload"),
    served_model_name: str | None = typer.Option(None, "--served-model-name", help="model name in responses"),
    threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads"),
    sample_log: str | None = typer.Option(None, "--sample-log", help="append every generation to this JSONL"),
    seed: int = typer.Option(0, "--seed", help="seed of the tiny random models' weights"),
) -> None:
    """Serve a local model over an OpenAI-compatible API (chat and text completions, streaming,
    token ids and log-probs in vLLM's shape, SGLang's /update_weights_from_disk)."""
    require(("torch", "transformers"), what="traj serve", install=INSTALL_TRAIN_EXTRA)
    from trajstore.trainer.serving.routes import LOGPROB_INFO  # torch: imported once it is known to be there
    from trajstore.trainer.serving.serve import run_serve

    try:
        cfg = ServeConfig(model=model, tokenizer=tokenizer, host=host, port=port, device=device, dtype=dtype,
                          max_batch_size=max_batch_size, weight_version=weight_version,
                          served_model_name=served_model_name, threads=threads, sample_log=sample_log, seed=seed)
    except ValidationError as e:
        raise invalid_options(e) from None

    def ready(h: str, p: int) -> None:
        typer.echo(f"traj serve: {cfg.served_model_name or model} on http://{h}:{p}/v1 "
                   f"(weight version {weight_version})", err=True)
        typer.echo(f"  log-probs: {LOGPROB_INFO['logprob_mode']}, of the distribution each token is drawn from "
                   f"({', '.join(LOGPROB_INFO['logprob_processing'])}, renormalised; in GET /v1/models)", err=True)

    try:
        run_serve(cfg, on_ready=ready)
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after its graceful shutdown
        typer.echo("traj serve: stopped", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
