"""The state every ``traj serve`` endpoint shares: config, tokenizer, engine, chat renderer,
model limits, and the optional JSONL log of every generation (``--sample-log``)."""

from __future__ import annotations

import json
import threading
from typing import Any

from trajstore.trainer.serving.chat import ChatRenderer
from trajstore.trainer.serving.config import ServeConfig
from trajstore.trainer.serving.request import ParsedCall
from trajstore.trainer.serving.response import version_spans


class ServeApp:
    """State shared by the endpoints: config, tokenizer, engine, renderer, sample log."""

    def __init__(self, cfg: ServeConfig, tokenizer: Any, engine: Any, *, model_name: str, vocab_size: int,
                 max_model_len: int):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.engine = engine
        self.renderer = ChatRenderer(tokenizer)
        self.model_name = model_name
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._log_lock = threading.Lock()

    def log_sample(self, call: ParsedCall, token_ids: list[int], logprobs: list[float], versions: list[str],
                   finish_reason: str) -> None:
        if not self.cfg.sample_log:
            return
        rec = {"id": call.id, "endpoint": "chat" if call.chat else "completions", "prompt_token_ids": call.prompt_ids,
               "token_ids": token_ids, "logprobs": logprobs, "weight_version_spans": version_spans(versions),
               "finish_reason": finish_reason, "seed": call.sampling.seed}
        with self._log_lock, open(self.cfg.sample_log, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
