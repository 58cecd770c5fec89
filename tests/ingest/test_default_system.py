"""A chat template's default system prompt is found by probing the template, and left out of the
render of a log that has no system message (text the model was never shown to have seen)."""

from __future__ import annotations

import jinja2

from trajstore.ingest.builders.default_system import find_default_system

CHATML_DEFAULT = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nDEFAULT<|im_end|>\n"
    "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
"""SmolLM2 / Qwen2-style: a default system block when the first message is not a system message."""

TOOLS_IN_BLOCK = (
    "<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}DEFAULT"
    "{% endif %}{% if tools %}\n\n# Tools {{ tools | length }}{% endif %}<|im_end|>\n"
    "{% for m in messages %}{% if not (loop.first and m['role'] == 'system') %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}")
"""Qwen2.5-style: the default and the tool list share the system block."""

BOS_DEFAULT = (
    "<s>{% for m in messages %}{% if loop.first and m['role'] != 'system' %}[SYS]DEFAULT[/SYS]{% endif %}"
    "{% if m['role'] == 'system' %}[SYS]{{ m['content'] }}[/SYS]{% else %}[{{ m['role'] }}]{{ m['content'] }}"
    "{% endif %}{% endfor %}")
"""A BOS text first, then a default system block."""

PREAMBLE_ONLY = (
    "<s>[SYS]Today: 1 Jan{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}[/SYS]"
    "{% for m in messages %}{% if m['role'] != 'system' %}[{{ m['role'] }}]{{ m['content'] }}{% endif %}{% endfor %}")
"""Llama-3-style: a preamble written with or without a system message, no default content."""


def _renderer(src: str, tools=None):
    tpl = jinja2.Environment().from_string(src)
    return lambda msgs: tpl.render(messages=msgs, tools=tools)


def test_chatml_default_block_is_left_out_whole():
    d = find_default_system(_renderer(CHATML_DEFAULT), bos="<|im_start|>", tools_in_block=False)
    assert d is not None and d.text == "DEFAULT"
    # <|im_start|> opens every turn: a header, not a BOS to keep
    text = _renderer(CHATML_DEFAULT)([{"role": "user", "content": "hi"}])
    assert d.without(text) == "<|im_start|>user\nhi<|im_end|>\n"
    assert d.without("<|im_start|>system\nS<|im_end|>\n") is None  # a logged system message is not touched


def test_default_beside_a_tool_list_leaves_the_tools():
    d = find_default_system(_renderer(TOOLS_IN_BLOCK, tools=[{}]), bos=None, tools_in_block=True)
    assert d is not None and d.text == "DEFAULT"
    text = _renderer(TOOLS_IN_BLOCK, tools=[{}])([{"role": "user", "content": "hi"}])
    assert d.without(text) == "<|im_start|>system\n\n\n# Tools 1<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"


def test_bos_before_a_default_block_is_kept():
    d = find_default_system(_renderer(BOS_DEFAULT), bos="<s>", tools_in_block=False)
    assert d is not None and d.text == "DEFAULT"
    assert d.without(_renderer(BOS_DEFAULT)([{"role": "user", "content": "hi"}])) == "<s>[user]hi"


def test_a_preamble_without_default_content_is_no_default():
    assert find_default_system(_renderer(PREAMBLE_ONLY), bos="<s>", tools_in_block=False) is None
    plain = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    assert find_default_system(_renderer(plain), bos=None, tools_in_block=False) is None
