"""One request to ``traj serve`` parsed and checked: the prompt token ids (chat messages rendered,
or a text/id prompt) and the engine's sampling settings, or a ValueError naming the bad field."""

from __future__ import annotations

import time
import uuid
from typing import Any

from trajstore.http.openai_fields import ChatFields, CompletionFields
from trajstore.trainer.serving.engine import Sampling
from trajstore.trainer.serving.state import ServeApp


class ParsedCall:
    """Parsed request of either endpoint: the prompt ids and the generation settings."""

    def __init__(self, body: dict[str, Any], p: ChatFields | CompletionFields, *, chat: bool, app: ServeApp):
        """`p`: the body's fields, typed as vLLM types them (:func:`~trajstore.http.openai_fields.check_request`).

        Raises:
            ValueError: a request this server cannot answer, naming the field.
        """
        self.chat = chat
        self.body = body
        if p.n not in (1, None):
            raise ValueError("traj serve samples one choice per request (n = 1)")
        self.stream = bool(p.stream)
        self.include_usage = bool((p.stream_options or {}).get("include_usage"))
        self.return_token_ids = bool(p.return_token_ids)
        self.tools = None
        if chat:
            assert isinstance(p, ChatFields)
            self.tools = p.tools if p.tool_choice != "none" else None
            self.prompt_ids = app.renderer.prompt_ids(body["messages"], p.tools)
            self.want_logprobs = bool(p.logprobs)
            top = p.top_logprobs or 0
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if isinstance(prompt, str):
                self.prompt_ids = list(app.tokenizer(prompt)["input_ids"])
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                             for t in prompt):
                self.prompt_ids = [int(t) for t in prompt]
            else:
                raise ValueError("prompt must be a string or a non-empty list of token ids (one prompt)")
            self.want_logprobs = p.logprobs is not None and body.get("logprobs") is not False  # as the proxy reads it
            top = (p.logprobs or 0) if self.want_logprobs else 0
        vocab = app.vocab_size
        bad = [t for t in self.prompt_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab})")
        max_tokens = p.max_completion_tokens or p.max_tokens or app.cfg.max_tokens_default
        stop_ids = set(p.stop_token_ids or [])
        if not p.ignore_eos:
            stop_ids |= set(app.engine.eos_token_ids)
        allowed = p.allowed_token_ids
        structured = body.get("structured_outputs") or {}
        if not isinstance(structured, dict):
            raise ValueError("structured_outputs: must be an object")
        guided = body.get("guided_choice") or structured.get("choice")
        choices = None
        if guided is not None:
            if not isinstance(guided, list) or not guided or not all(isinstance(c, str) and c for c in guided):
                raise ValueError("guided_choice must be a non-empty list of non-empty strings")
            eos = app.engine.eos_token_ids[:1]
            choices = tuple(tuple(app.tokenizer(c, add_special_tokens=False)["input_ids"]) + tuple(eos)
                            for c in guided)
        self.sampling = Sampling(
            max_new_tokens=int(max_tokens), temperature=1.0 if p.temperature is None else p.temperature,
            top_p=1.0 if p.top_p is None else p.top_p, top_k=-1 if p.top_k is None else p.top_k,
            min_p=0.0 if p.min_p is None else p.min_p,
            stop_token_ids=tuple(sorted(stop_ids)),
            allowed_token_ids=None if allowed is None else tuple(allowed),
            seed=p.seed, top_logprobs=top, choices=choices)
        if self.sampling.max_new_tokens < 1 or self.sampling.temperature < 0 or not 0 < self.sampling.top_p <= 1:
            raise ValueError("need max_tokens >= 1, temperature >= 0 and 0 < top_p <= 1")
        stop = p.stop
        self.stop_strings = [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
