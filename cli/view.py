"""``traj view``: parse options, run :func:`trajstore.view.run_view` (the local web viewer)."""

from __future__ import annotations

import os

import typer
from pydantic import ValidationError

from trajstore.cli.app import TrajTyper
from trajstore.cli.errors import EXIT_ERROR, friendly_errors, invalid_options
from trajstore.cli.options import StorageOptions, StoreArgument, parse_storage_options
from trajstore.extras import require
from trajstore.http.sockets import PortInUseError
from trajstore.view.config import DEFAULT_VIEW_PORT, DEFAULT_VIEW_TOKEN_ENV, ViewConfig

commands = TrajTyper()


@commands.command("view")
@friendly_errors
def view_cmd(
    store: StoreArgument,
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind (loopback by default)"),
    port: int = typer.Option(DEFAULT_VIEW_PORT, "--port", help="TCP port (0 = any free port; the bound one is "
                                                               "printed)"),
    run: str | None = typer.Option(None, "--run", help="training run whose staleness and per-token annotations "
                                   "pages show by default (default: the newest run that trained each trajectory)"),
    where: str | None = typer.Option(None, "--where", help="SQL predicate over trajectories columns applied to "
                                     "every listing, e.g. \"source = 'sdk'\""),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="decode with this tokenizer instead of each "
                                         "trajectory's own (alias, .gguf file or local Hugging Face folder)"),
    page_size: int = typer.Option(50, "--page-size", help="rows per list page"),
    token_env: str = typer.Option(DEFAULT_VIEW_TOKEN_ENV, "--client-token-env", help="environment variable with the "
                                  "token clients must present (unset: no token asked)"),
    storage_option: StorageOptions = [],  # noqa: B006 - typer reads the default
) -> None:
    """Browse a store in the browser: trajectories and episodes with filters, each trajectory's
    transcript, and its tokens coloured by log-prob, policy version, staleness and what the trainer
    did with them. Serves http://HOST:PORT until Ctrl-C."""
    try:
        cfg = ViewConfig(store=store, storage_options=parse_storage_options(storage_option, store), host=host,
                         port=port, run=run, where=where, tokenizer=tokenizer, page_size=page_size,
                         token=os.environ.get(token_env) or None)
    except ValidationError as e:
        raise invalid_options(e) from None
    require(("fastapi", "uvicorn", "jinja2"), what="traj view", install="pip install 'trajstore[view]'")
    from trajstore.view.app import run_view  # the web extras, imported once they are known to be there
    typer.echo(f"traj view: indexing {store} ...", err=True)

    def ready(h: str, p: int, index: object) -> None:
        snap = index.snapshot  # type: ignore[attr-defined]
        shown = f"[{h}]" if ":" in h else h
        typer.echo(f"traj view: http://{shown}:{p}/ ({snap.trajectories:,} trajectories indexed in "
                   f"{snap.build_s:.1f} s{'; token required: ' + token_env if cfg.token else ''})", err=True)

    try:
        run_view(cfg, on_ready=ready)
    except PortInUseError as e:  # one line naming the port and the option, not "Address already in use"
        typer.echo(f"error: {e}: choose another with --port N (--port 0: any free port)", err=True)
        raise typer.Exit(EXIT_ERROR) from None
