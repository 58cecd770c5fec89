"""Type checks of an OpenAI-compatible completion request's sampling fields, shared by
``traj proxy`` (which refuses a bad request before it reaches the upstream, so that a client's
typo never fails an episode) and ``traj serve`` (which must answer 400, never 500).

The types follow the OpenAI API reference and vLLM's request models (``ChatCompletionRequest``,
``CompletionRequest`` in ``vllm/entrypoints/openai/protocol.py``), which validate the same
fields with pydantic in its default (lax) mode: ``10`` and ``10.0`` are a valid ``max_tokens``,
``10.5`` is not; ``seed`` must fit a signed 64-bit integer. Only the fields listed here are
checked (others pass through to the upstream untouched), and ``messages`` only for its shape
(a non-empty list of objects), so the check stays cheap on long conversations.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.types import FiniteFloat
from starlette.requests import Request

from trajstore.http.json_body import read_json_object

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class RequestFieldError(ValueError):
    """A request field of the wrong type or range; ``field`` names it (top level, e.g. ``tools``)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    n: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: FiniteFloat | None = Field(None, ge=0)
    top_p: FiniteFloat | None = Field(None, gt=0, le=1)
    top_k: int | None = None
    min_p: FiniteFloat | None = Field(None, ge=0, le=1)
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    presence_penalty: FiniteFloat | None = None
    frequency_penalty: FiniteFloat | None = None
    repetition_penalty: FiniteFloat | None = Field(None, gt=0)
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    return_token_ids: bool | None = None
    allowed_token_ids: list[int] | None = None


class ChatFields(_Common):
    """The checked fields of a ``/v1/chat/completions`` body (chat ``logprobs`` is a flag)."""

    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None


class CompletionFields(_Common):
    """The checked fields of a ``/v1/completions`` body (``logprobs`` is the number of
    alternatives per token)."""

    logprobs: int | None = Field(None, ge=0)


_FIELDS = {cls: frozenset(cls.model_fields) for cls in (ChatFields, CompletionFields)}


def check_request(body: dict[str, Any], *, chat: bool) -> ChatFields | CompletionFields:
    """The typed sampling fields of a completion request body.

    Args:
        body: the parsed JSON object (not modified).
        chat: a chat request (``messages``) rather than a text completion (``prompt``).

    Returns:
        The checked fields, converted as the upstream would (``max_tokens: 10.0`` -> 10);
        fields the body does not have are None.

    Raises:
        RequestFieldError: (a ValueError) one line naming the first bad field, e.g. ``max_tokens: Input should be a
            valid integer, got a number with a fractional part (got 10.5)``.
    """
    cls = ChatFields if chat else CompletionFields
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise RequestFieldError("messages", "messages: must be a non-empty list of message objects")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise RequestFieldError("messages", f"messages[{i}]: must be an object, got {type(m).__name__}")
    fields = _FIELDS[cls]
    try:
        return cls.model_validate({k: v for k, v in body.items() if k in fields})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = err["loc"]  # the field, then list indexes (union member names like "str" left out)
        where = "".join([str(loc[0]), *(f"[{p}]" for p in loc[1:] if isinstance(p, int))]) if loc else "body"
        msg = _PLAIN.get(err["type"], err["msg"])
        got = repr(err.get("input"))
        raise RequestFieldError(str(loc[0]) if loc else "body",
                                f"{where}: {msg} (got {got[:60]}{'...' if len(got) > 60 else ''})") from None


_PLAIN = {"int_parsing_size": "Input should be an integer in the signed 64-bit range"}


async def read_completion_request(request: Request, limit: int, *, chat: bool
                                  ) -> tuple[dict[str, Any], ChatFields | CompletionFields]:
    """A completion request's body (a strict JSON object of at most `limit` bytes) and its
    checked fields (:func:`check_request`).

    Raises:
        BodyError: 413 or 400, the body is too large or not a strict JSON object.
        RequestFieldError: a field of the wrong type or range (answer 400 naming it).
    """
    body = await read_json_object(request, limit)
    return body, check_request(body, chat=chat)
