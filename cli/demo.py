"""``traj demo``: parse sizes, run :func:`trajstore.trainer.apps.demo.run_demo`, print the audits."""

from __future__ import annotations

import json
import os

import typer

from trajstore.cli.display import OutputFormat
from trajstore.cli.main import FormatOption, app, friendly_errors, invalid_options
from trajstore.trainer.apps.demo import DEFAULT_STORE, DemoConfig


@app.command("demo")
@friendly_errors
def demo_cmd(
    store: str = typer.Option(DEFAULT_STORE, "--store", metavar="STORE", help="local store directory (reused; each demo is a run)"),
    model: str = typer.Option("smollm2-135m", "--model", help="policy: smollm2-135m, a HF directory or .gguf file"),
    steps: int = typer.Option(4, "--steps", min=1, help="policy updates the trainer makes"),
    episodes: int | None = typer.Option(None, "--episodes", min=1, help="episodes the agents play at most "
                                           "(default: until the trainer finishes)"),
    max_new_tokens: int = typer.Option(24, "--max-new-tokens", min=1, help="tokens per action at most"),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="trajectories per training step"),
    warmup_steps: int = typer.Option(1, "--critic-warmup-steps", min=0, help="critic-only steps first"),
    run_id: str | None = typer.Option(None, "--run-id", help="training run id (default demo-<UTC time>)"),
    seed: int = typer.Option(0, "--seed", help="seed of tasks and sampling"),
    keep_weights: bool = typer.Option(False, "--keep-weights/--no-keep-weights",
                                      help="keep every published version and the "
                                      "checkpoint (about 0.5 GB per SmolLM2 version); default: only the last"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Run the asynchronous RL loop on real model output: agents play guess-the-number with
    SmolLM2-135M-Instruct through `traj proxy` (in front of `traj serve`), which records every call
    into a local store, while `traj train --follow` consumes it and publishes new policy versions
    that the server reloads; then print staleness, clip audits and reward per policy version."""
    from rich.console import Console

    from trajstore.extras import INSTALL_TRAIN_EXTRA, require

    require(("torch", "transformers", "safetensors"), what="traj demo", install=INSTALL_TRAIN_EXTRA)
    from trajstore.trainer.apps.demo import print_summary, result_to_dict, run_demo

    from pydantic import ValidationError

    try:
        cfg = DemoConfig(store=store, model=model, steps=steps, episodes=episodes, max_new_tokens=max_new_tokens,
                         batch_size=batch_size, critic_warmup_steps=warmup_steps, run_id=run_id, seed=seed,
                         keep_weights=keep_weights,
                         tokenizer=model if not model.startswith("tiny-") else "smollm2-135m")
    except ValidationError as e:
        raise invalid_options(e) from None
    from trajstore.store import open_store_for_writing

    open_store_for_writing(cfg.store, command="traj demo")  # a mistyped --store: refused before a model loads
    console = Console(stderr=fmt is not OutputFormat.table)  # progress; results go to stdout
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        # piped or logged without a width: do not squeeze the audit tables into rich's default 80
        # columns; a width the user set (COLUMNS=80) is kept, as every other command keeps it
        console.width = max(console.width, 120)
    result = run_demo(cfg, console=console)
    if fmt is OutputFormat.json:
        typer.echo(json.dumps(result_to_dict(result), indent=2))
    elif fmt is OutputFormat.csv:  # the result's tables, one CSV section each
        from trajstore.cli.display import render_tables
        from trajstore.tables import TableData

        doc = result_to_dict(result)
        render_tables([TableData(k, list(v[0]), [tuple(r.values()) for r in v]) for k, v in doc.items()
                       if isinstance(v, list) and v and isinstance(v[0], dict)], fmt)
    else:
        print_summary(result, console)
    if result.shortfall:  # the summary is printed, but the demo did not do what was asked
        raise typer.Exit(1)
