"""Response pieces of ``traj serve`` in OpenAI/vLLM's shape: incremental detokenisation, stop
strings, per-token log-prob entries, weight-version spans and usage counts."""

from __future__ import annotations

from typing import Any


class Detokenizer:
    """Incremental detokenisation: text deltas that never end inside a multi-byte character."""

    def __init__(self, tokenizer: Any, stop_ids: set[int]):
        self.tok = tokenizer
        self.ids: list[int] = []
        self.sent = ""
        self.stop_ids = stop_ids

    def text(self, final: bool = False) -> str:
        ids = self.ids[:-1] if final and self.ids and self.ids[-1] in self.stop_ids else self.ids
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def push(self, tok: int) -> str:
        self.ids.append(tok)
        if tok in self.stop_ids:
            return ""
        full = self.text()
        if full.endswith("\ufffd"):
            return ""
        delta, self.sent = full[len(self.sent):], full
        return delta


def version_spans(versions: list[str]) -> list[list[Any]]:
    """[[start, end, version], ...] runs of equal versions over a call's tokens."""
    spans: list[list[Any]] = []
    for i, v in enumerate(versions):
        if spans and spans[-1][2] == v:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1, v])
    return spans


def usage_of(prompt: int, completion: int) -> dict[str, int]:
    """OpenAI's ``usage`` object from the prompt and completion token counts."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def token_text(tok: Any, tid: int) -> str:
    """One token id as text, special tokens and spacing kept."""
    return tok.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def chat_logprob_entry(tok: Any, tid: int, lp: float, top: tuple[tuple[int, float], ...]) -> dict[str, Any]:
    """A chat ``logprobs.content`` entry: the token, its log-prob (nats), bytes and `top` alternatives."""
    s = token_text(tok, tid)
    return {"token": s, "logprob": lp, "bytes": list(s.encode()),
            "top_logprobs": [{"token": token_text(tok, a), "logprob": b, "bytes": list(token_text(tok, a).encode())}
                             for a, b in top]}


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """`text` up to the earliest stop string, and whether one was found."""
    hits = [text.find(s) for s in stops if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


def completion_logprobs(tok: Any, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Chat-style log-prob entries as the legacy completions ``logprobs`` object."""
    offsets, pos = [], 0
    for e in entries:
        offsets.append(pos)
        pos += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}
