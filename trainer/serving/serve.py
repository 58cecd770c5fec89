"""The ``traj serve`` process: load the model and tokenizer into a ready :class:`ServeApp` with its
engine, then serve it with uvicorn until SIGINT / SIGTERM."""

from __future__ import annotations

import sys
from typing import Any

from trajstore.errors import TrajstoreError
from trajstore.hub import SMOLLM2_ALIAS
from trajstore.trainer.serving.config import ServeConfig
from trajstore.trainer.serving.routes import build_app
from trajstore.trainer.serving.state import ServeApp


class ServeError(TrajstoreError):
    """``traj serve`` cannot start (model, tokenizer or device)."""


def load_serve_app(cfg: ServeConfig) -> ServeApp:
    """Load the model and tokenizer and start the engine.

    Raises:
        ServeError: the device is not available; TrajstoreError: model or tokenizer not found.
    """
    import torch

    from trajstore.hub import load_tokenizer
    from trajstore.trainer.models import TINY_MODELS, load_policy
    from trajstore.trainer.serving.engine import Engine

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


def run_serve(cfg: ServeConfig, *, on_ready: Any = None) -> None:
    """Load, then serve until SIGINT / SIGTERM (uvicorn's handlers; in-flight requests end).

    Args:
        on_ready: called with the bound ``(host, port)`` once the socket listens.
    """
    import uvicorn

    from trajstore.proxy.server import listening_socket

    state = load_serve_app(cfg)
    api = build_app(state)
    sock = listening_socket(cfg.host, cfg.port)  # connections wait in the backlog until uvicorn accepts them
    host, port = sock.getsockname()[:2]
    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:  # one line, at once: the stop itself takes seconds (in-flight requests, the engine)
                print("traj serve: stopping (in-flight requests end first, at most 10 s)", file=sys.stderr, flush=True)
            super().handle_exit(sig, frame)

    # lifespan off: the app has no startup/shutdown hooks, and uvicorn's lifespan task printed a
    # CancelledError traceback on Ctrl-C
    server = _Server(uvicorn.Config(api, log_level="warning", timeout_graceful_shutdown=10, lifespan="off"))
    if on_ready is not None:
        on_ready(host, port)
    # uvicorn re-raises a SIGTERM after its graceful shutdown; with this handler in place that
    # ends the process normally (exit 0) once everything is written.
    import signal

    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        state.engine.close()
