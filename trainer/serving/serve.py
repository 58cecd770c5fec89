"""The ``traj serve`` process: load the model and tokenizer into a ready :class:`ServeApp` with its
engine, then serve it with uvicorn until SIGINT / SIGTERM."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from trajstore.errors import TrajstoreError
from trajstore.http.server import GRACEFUL_SHUTDOWN_S, Server, serve
from trajstore.http.sockets import listening_socket
from trajstore.hub import SMOLLM2_ALIAS, load_tokenizer
from trajstore.trainer.models import TINY_MODELS, load_policy
from trajstore.trainer.serving.config import ServeConfig
from trajstore.trainer.serving.engine import Engine
from trajstore.trainer.serving.routes import create_app
from trajstore.trainer.serving.state import ServeApp


class ServeError(TrajstoreError):
    """``traj serve`` cannot start (model, tokenizer or device)."""


def load_serve_app(cfg: ServeConfig) -> ServeApp:
    """Load the model and tokenizer and start the engine.

    Raises:
        ServeError: the device is not available; TrajstoreError: model or tokenizer not found.
    """
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ServeError(f"--device {cfg.device}: CUDA is not available on this machine")
    tiny = cfg.model in TINY_MODELS
    tok_name = cfg.tokenizer or (SMOLLM2_ALIAS if tiny else cfg.model)
    tokenizer = load_tokenizer(tok_name)
    policy = load_policy(cfg.model, tiny_vocab_size=len(tokenizer) if tiny else 256, seed=cfg.seed)
    dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32, "float32": torch.float32,
             "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg.dtype]
    model = policy.model.to(device=device, dtype=dtype).eval()
    model.config.use_cache = True
    for p in model.parameters():
        p.requires_grad_(False)
    eos = [t for t in {tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)}
           if isinstance(t, int)]
    engine = Engine(model, eos_token_ids=eos, version=cfg.weight_version, max_batch_size=cfg.max_batch_size)
    max_len = int(getattr(model.config, "max_position_embeddings", 8192) or 8192)
    return ServeApp(cfg, tokenizer, engine, model_name=cfg.served_model_name or cfg.model,
                    vocab_size=int(model.get_output_embeddings().weight.shape[0]), max_model_len=max_len)


def _say_stopping(_server: Server) -> bool:
    """One line at once on the first stop signal (the stop itself takes seconds: in-flight
    requests, the engine); uvicorn then stops as usual."""
    print(f"traj serve: stopping (in-flight requests end first, at most {GRACEFUL_SHUTDOWN_S:g} s)", file=sys.stderr,
          flush=True)
    return False


def run_serve(cfg: ServeConfig, *, on_ready: Callable[[str, int], object] | None = None) -> None:
    """Load, then serve until SIGINT / SIGTERM (in-flight requests end first; a SIGTERM exits 0).

    Args:
        on_ready: called with the bound ``(host, port)`` once the socket listens.

    Raises:
        PortInUseError: ``cfg.port`` is taken (an ``OSError``).
    """
    state = load_serve_app(cfg)
    api = create_app(state)
    sock = listening_socket(cfg.host, cfg.port)  # connections wait in the backlog until uvicorn accepts them
    host, port = sock.getsockname()[:2]
    if on_ready is not None:
        on_ready(host, port)
    try:
        # lifespan off: the app has no startup/shutdown hooks, and uvicorn's lifespan task printed a
        # CancelledError traceback on Ctrl-C
        serve(api, sock, lifespan="off", on_stop_signal=_say_stopping)
    finally:
        state.engine.close()
