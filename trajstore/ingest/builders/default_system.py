"""A chat template's default system prompt: text the template writes when a conversation has no
system message (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
Qwen2.5: "You are Qwen, created by Alibaba Cloud. ..."). A log without a system message does not
say the model was sent that text, so a stored context must not hold it.

The default is found by probing the template, whatever its wording: the render of
``[system S, user U]`` is ``pre + S + post``; when the render of ``[user U]`` is
``pre + D + post`` with ``D`` non-empty, ``D`` is the template's default. Its whole block
(``pre + D + close``, ``close`` from the render of ``[system S]``) is then left out of every render
of a conversation that starts without a system message, keeping a BOS text the template writes
first; where the template renders a tool list in that block (``tools=``), only ``D`` is left out
and the block stays with the tools. A template that writes an always-present preamble (Llama 3's
date lines) has ``D = ""`` and is left as it renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_SYSTEM = "\u2063probe-system\u2063"
_USER = "\u2063probe-user\u2063"


@dataclass(frozen=True)
class DefaultSystem:
    """What a template inserts when there is no system message.

    Attributes:
        text: the default system content (``D``).
        block: the rendered prefix that holds it, as it starts every such render.
        keep: what stays in place of `block` (a BOS text, or the block's frame when it holds tools).
    """

    text: str
    block: str
    keep: str

    def without(self, rendered: str) -> str | None:
        """`rendered` without the default block; None when it does not start with it."""
        if not rendered.startswith(self.block):
            return None
        return self.keep + rendered[len(self.block):]


def find_default_system(render: Callable[[list[dict[str, Any]]], str], *, bos: str | None,
                        tools_in_block: bool) -> DefaultSystem | None:
    """The template's default system prompt, probed through `render` (messages -> text, no
    generation prompt); None when it writes none or the probes cannot be rendered.

    Args:
        render: renders a list of ``{"role", "content"}`` dicts with the template (tools fixed).
        bos: the tokenizer's BOS text, kept when the template writes it before the block (and
            not as the header of every turn).
        tools_in_block: the template renders the tool list in the system block: strip only the text.
    """
    try:
        bare = render([{"role": "user", "content": _USER}])
        with_sys = render([{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER}])
        only_sys = render([{"role": "system", "content": _SYSTEM}])
    except ValueError:
        return None
    at = with_sys.find(_SYSTEM)
    if at < 0 or _SYSTEM in bare:
        return None
    pre, post = with_sys[:at], with_sys[at + len(_SYSTEM):]
    if not (bare.startswith(pre) and bare.endswith(post)) or len(bare) <= len(pre) + len(post):
        return None
    text = bare[len(pre):len(bare) - len(post)]
    j = only_sys.find(_SYSTEM)
    close = only_sys[j + len(_SYSTEM):] if j == len(pre) and only_sys.startswith(pre) else None
    if not tools_in_block and close and bare.startswith(pre + text + close):
        # a BOS text is kept; a token that also opens the other turns (ChatML's <|im_start|>) is a header
        keep = bos if bos and pre.startswith(bos) and bos not in post else ""
        return DefaultSystem(text, pre + text + close, keep)
    return DefaultSystem(text, pre + text, pre)
