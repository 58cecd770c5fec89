"""The state every ``traj serve`` endpoint shares: config, tokenizer, engine, chat renderer,
model limits, and the optional JSONL log of every generation (``--sample-log``)."""

from __future__ import annotations

import json
import threading
from typing import Any

from trajstore.trainer.serving.chat import PromptRenderer
from trajstore.trainer.serving.config import ServeConfig


class ServeApp:
    """State shared by the endpoints: config, tokenizer, engine, renderer, sample log."""

    def __init__(self, cfg: ServeConfig, tokenizer: Any, engine: Any, *, model_name: str, vocab_size: int,
                 max_model_len: int):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.engine = engine
        self.renderer = PromptRenderer(tokenizer)
        self.model_name = model_name
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.max_request_bytes = int(cfg.max_request_mb * 2**20)
        self._log_lock = threading.Lock()

    def log_sample(self, record: dict[str, Any]) -> None:
        """Append one generation's record to ``--sample-log`` (one JSON line; nothing without one)."""
        if not self.cfg.sample_log:
            return
        with self._log_lock, open(self.cfg.sample_log, "a") as fh:
            fh.write(json.dumps(record) + "\n")
