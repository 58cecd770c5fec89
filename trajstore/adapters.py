"""Turn rollout-engine responses into action calls with exact token ids and log-probs.

Supported:
- OpenAI-compatible chat or text completions from vLLM with ``return_token_ids`` (choice
  ``token_ids``) and ``logprobs`` (chat: ``logprobs.content[i].logprob``; text completions:
  ``logprobs.token_logprobs[i]``).
- SGLang native ``/generate`` with ``return_logprob``: ``meta_info.output_token_logprobs`` as
  ``[logprob, token_id, text]`` triples (and ``output_ids`` when present).

Each log-prob is matched to the *sampled* token id; a top-k list is only consulted by token
id, never by position. Sampled ids are read from ``token_ids`` / ``output_ids`` or, when an
engine returns them nowhere else, from the log-prob entries (``"token_id:<n>"`` token strings
of vLLM ``--return-tokens-as-token-ids``, or a ``token_id`` field). A response with generated
text but no token ids raises :class:`~trajstore.errors.AdapterError`: silently dropping it
would corrupt the trajectory.

A log-prob the engine could not give is *missing* (NaN), never a number: ``null``, NaN, +-inf
and the stand-in :data:`ENGINE_LOGPROB_FLOOR` (vLLM's JSON-safe clamp of -inf) all become NaN.
The store keeps such a token as missing (schema v2 counts it in ``num_missing_logprobs``), the
trainer leaves it out of the policy loss and ``traj stats --coverage`` counts it.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trajstore.errors import AdapterError
from trajstore.models import CallTiming, CallUsage, SamplingParams
from trajstore.sampling import REQUEST_FIELDS

_TOKEN_ID_STR = re.compile(r"^token_id:(\d+)$")


@dataclass
class ActionCall:
    """One model call, ready for :meth:`TrajectoryBuilder.add_action_call`.

    Attributes:
        token_ids: generated token ids, int32, shape (N,).
        logprobs: rollout-engine log-prob of each sampled token in nats, float32, shape (N,);
            NaN where the engine gave none.
        prompt_token_ids: the engine's prompt ids when it returned them (for checking that the
            harness's context matches what the model saw), else None.
        finish_reason: ``stop``, ``length``, ``tool_calls``, ... as reported.
        text: the decoded completion text, for reference.
        tool_call_ids: ids of tool calls in the response (to link observations by id).
        call_id: the response id.
        sampling: the call's sampling parameters, when known.
        usage: the engine's token counts (the response's ``usage``), when it gave them.
        timing: when the call started, sent its first token and ended (set by whoever timed it,
            e.g. ``traj proxy``; a response does not say).
    """

    token_ids: np.ndarray
    logprobs: np.ndarray
    prompt_token_ids: np.ndarray | None = None
    finish_reason: str | None = None
    text: str | None = None
    tool_call_ids: list[str] = field(default_factory=list)
    call_id: str | None = None
    sampling: SamplingParams | None = None
    usage: CallUsage | None = None
    timing: CallTiming | None = None

    @property
    def missing_logprobs(self) -> np.ndarray:
        """Positions (int64, shape (M,)) of generated tokens without an engine log-prob (NaN)."""
        return np.flatnonzero(np.isnan(self.logprobs))


ENGINE_LOGPROB_FLOOR = -9999.0
"""vLLM's OpenAI server writes ``max(logprob, -9999.0)`` so that JSON never holds -inf: a value at
or below it stands for "impossible under the processed distribution", not a measured log-prob."""

_INT32_MAX = int(np.iinfo(np.int32).max)


def token_ids_from(value: Any, where: str) -> np.ndarray:
    """`value` as int32 token ids; a flat list of integers in [0, 2**31) or AdapterError naming
    `where` (floats, strings, nested lists and out-of-range ids are never coerced)."""
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise AdapterError(f"{where} must be a list of token ids, got {type(value).__name__}")
    if isinstance(value, (list, tuple)) and set(map(type, value)) <= {int}:  # the usual case, ~10x faster
        try:
            arr = np.asarray(value, dtype=np.int64).reshape(-1)
        except OverflowError:  # beyond int64: the loop below names it
            arr = None
        if arr is not None and (not len(arr) or (int(arr.min()) >= 0 and int(arr.max()) <= _INT32_MAX)):
            return arr.astype(np.int32)
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise AdapterError(f"{where}[{i}] must be an integer token id, got {x!r}")
        if not 0 <= int(x) <= _INT32_MAX:
            raise AdapterError(f"{where}[{i}] = {int(x)} is not a token id in [0, 2**31)")
    return np.asarray([int(x) for x in value], dtype=np.int32).reshape(-1)


def _malformed(kind: str, fn: Any) -> Any:
    """Wrap an adapter so that a response of the wrong shape raises AdapterError, not a raw
    AttributeError / TypeError / KeyError from deep inside."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> ActionCall:
        try:
            return fn(*args, **kwargs)
        except AdapterError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
            raise AdapterError(f"malformed {kind} response: {type(e).__name__}: {e}") from e
    return wrapper


def engine_logprob(value: Any, where: str) -> float:
    """An engine log-prob as float32-able float; NaN (= missing) for null, NaN, +-inf and the
    :data:`ENGINE_LOGPROB_FLOOR` stand-in.

    Raises:
        AdapterError: `value` is not a number (a string, a bool, a list) or is positive, naming `where`.
    """
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise AdapterError(f"{where} is {value!r}, not a number")
    v = float(value)
    if not math.isfinite(v) or v <= ENGINE_LOGPROB_FLOOR:
        return math.nan
    if v > 0:
        raise AdapterError(f"{where} is {v!r}, not a log-prob (a log-probability is <= 0)")
    return v


def _entry_token_id(entry: Any, where: str) -> int | None:
    """The token id a chat ``logprobs.content`` entry (or top-k candidate) names, or None when it
    names none: a ``"token_id:<n>"`` token string or an integer ``token_id`` / ``id`` field."""
    if not isinstance(entry, dict):
        raise AdapterError(f"{where} is {type(entry).__name__}, not an object")
    tok = entry.get("token")
    if isinstance(tok, str):
        m = _TOKEN_ID_STR.match(tok)
        if m:
            return int(m.group(1))
    tid = entry.get("token_id", entry.get("id"))
    if isinstance(tid, bool) or not isinstance(tid, (int, np.integer)):
        return None
    return int(tid)


def _sampled_logprob(i: int, sampled: int, entry: dict[str, Any]) -> float:
    """The log-prob of token id `sampled` at position `i` from one chat ``logprobs.content`` entry;
    NaN when the entry is for that token but holds no real value."""
    where = f"logprobs.content[{i}]"
    eid = _entry_token_id(entry, where)
    if eid is None or eid == sampled:
        return engine_logprob(entry.get("logprob"), f"{where}.logprob")
    for k, cand in enumerate(entry.get("top_logprobs") or []):
        if _entry_token_id(cand, f"{where}.top_logprobs[{k}]") == sampled:
            return engine_logprob(cand.get("logprob"), f"{where}.top_logprobs[{k}].logprob")
    raise AdapterError(
        f"{where} is for token {eid} but the sampled token id is {sampled}, and it is "
        "not among that position's top_logprobs")


def _ids_from_entries(entries: list[Any], where: str) -> np.ndarray | None:
    """Sampled ids spelled inside log-prob entries (every entry must name one), else None when
    no entry names an id.

    Raises:
        AdapterError: some entries name an id and some do not (naming the first that does not).
    """
    ids = [_entry_token_id(e, f"{where}[{i}]") for i, e in enumerate(entries)]
    if not ids or all(x is None for x in ids):
        return None
    gap = next(i for i, x in enumerate(ids + [None]) if x is None)
    if gap < len(ids):
        raise AdapterError(f"no token_ids, and {where}[{gap}] names no token id while other entries do "
                           "('token_id:<n>' token string or a token_id field)")
    return token_ids_from(ids, f"{where}[*] token ids")


def _sampling_from_request(request: dict[str, Any] | None) -> SamplingParams | None:
    """The call's sampling parameters: temperature, top-p, top-k, min-p and max tokens, and in
    ``extra`` every other request field that shapes the distribution (penalties, logit bias,
    allowed tokens, grammars, ...: :data:`~trajstore.sampling.REQUEST_FIELDS`) that the request
    sets, from the OpenAI body or SGLang's ``sampling_params`` (its custom logit processor sits
    beside it)."""
    if not request:
        return None
    src = request.get("sampling_params", request)
    known = {k: src.get(k) for k in ("temperature", "top_p", "top_k", "min_p")}
    max_tokens = src.get("max_tokens", src.get("max_new_tokens", src.get("max_completion_tokens")))
    extra = {k: v for k in REQUEST_FIELDS if (v := src.get(k, request.get(k))) is not None}
    return SamplingParams(**{k: v for k, v in known.items() if v is not None},
                          max_tokens=max_tokens, extra=extra)


def action_from_openai_completion(response: dict[str, Any], *, request: dict[str, Any] | None = None,
                                  choice_index: int = 0) -> ActionCall:
    """Action call from an OpenAI-compatible (vLLM) chat or text completion response (a dict).

    Args:
        response: the JSON response; the choice must carry its sampled ids, as ``token_ids``
            (vLLM ``return_token_ids: true``) or inside every ``logprobs`` entry (vLLM
            ``--return-tokens-as-token-ids``: ``"token_id:<n>"`` token strings; a ``token_id``
            field), and, for engine log-probs, ``logprobs`` (chat ``content[i].logprob``, text
            ``token_logprobs[i]``).
        request: the request body, to record temperature / top_p / top_k / max_tokens.
        choice_index: which choice to take (n > 1 sampling).

    Returns:
        An :class:`ActionCall`; ``logprobs`` (nats, float32, shape (N,)) is NaN where the engine
        gave no value (null, NaN, +-inf, the -9999.0 stand-in: see :attr:`ActionCall.missing_logprobs`).

    Raises:
        AdapterError: no such choice; output without token ids; log-probs whose count or token
            ids do not match the sampled ids; a log-prob that is not a number.
    """
    choices = response.get("choices") or []
    if not isinstance(choices, list):
        raise AdapterError(f"response.choices must be a list, got {type(choices).__name__}")
    if not 0 <= choice_index < len(choices):
        raise AdapterError(f"response has {len(choices)} choice(s), no choice {choice_index}")
    ch = choices[choice_index]
    msg = ch.get("message") or {}
    text = ch.get("text") if "text" in ch else msg.get("content")
    tool_calls = msg.get("tool_calls") or []
    lp_obj = ch.get("logprobs") or {}
    content = lp_obj.get("content")
    tl = lp_obj.get("token_logprobs")
    ids = ch.get("token_ids")
    if ids is not None:
        token_ids = token_ids_from(ids, f"choices[{choice_index}].token_ids")
    else:  # vLLM --return-tokens-as-token-ids (no return_token_ids), or a token_id field per entry
        token_ids = (_ids_from_entries(content, "logprobs.content") if isinstance(content, list)
                     else _ids_from_entries([{"token": t} for t in lp_obj.get("tokens") or []], "logprobs.tokens")
                     if isinstance(tl, list) else None)
        if token_ids is None:
            has_output = bool(text) or bool(tool_calls) or bool(msg.get("reasoning_content"))
            raise AdapterError(
                "completion choice has " + ("generated output" if has_output else "no output") +
                " but no token_ids: request it with return_token_ids=true (vLLM) so the tokens the "
                "model sampled are recorded; retokenizing text gives different ids")
    logprobs = np.full(len(token_ids), np.nan, dtype=np.float32)
    if content is not None:
        if len(content) != len(token_ids):
            raise AdapterError(f"logprobs.content has {len(content)} entries for {len(token_ids)} token ids")
        logprobs[:] = [_sampled_logprob(i, int(t), e) for i, (t, e) in enumerate(zip(token_ids, content))]
    elif tl is not None:
        if len(tl) != len(token_ids):
            raise AdapterError(f"logprobs.token_logprobs has {len(tl)} entries for {len(token_ids)} token ids")
        toks = lp_obj.get("tokens") or [None] * len(tl)
        for i, (t, lp, s) in enumerate(zip(token_ids, tl, toks)):
            m = _TOKEN_ID_STR.match(s) if isinstance(s, str) else None
            if m and int(m.group(1)) != int(t):
                raise AdapterError(f"logprobs.tokens[{i}] is {s!r} but the sampled token id is {int(t)}")
            logprobs[i] = engine_logprob(lp, f"logprobs.token_logprobs[{i}]")
    prompt_ids = response.get("prompt_token_ids", ch.get("prompt_token_ids"))
    return ActionCall(
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_token_ids=None if prompt_ids is None else token_ids_from(prompt_ids, "prompt_token_ids"),
        finish_reason=ch.get("finish_reason"),
        text=text,
        tool_call_ids=[tc.get("id") for tc in tool_calls if tc.get("id")],
        call_id=response.get("id"),
        sampling=_sampling_from_request(request),
        usage=CallUsage.from_openai(response.get("usage")),
    )


def action_from_sglang_generate(response: dict[str, Any], *, request: dict[str, Any] | None = None) -> ActionCall:
    """Action call from an SGLang ``/generate`` response made with ``return_logprob: true``.

    Reads ``meta_info.output_token_logprobs`` (``[logprob, token_id, text]`` per generated
    token); when ``output_ids`` is present the two must agree token by token. A null or
    non-finite log-prob is missing (NaN), as in :func:`action_from_openai_completion`.

    Raises:
        AdapterError: text without ``output_token_logprobs``/``output_ids``; mismatched ids; a
            log-prob that is not a number.
    """
    meta = response.get("meta_info") or {}
    otl = meta.get("output_token_logprobs")
    out_ids = response.get("output_ids")
    if otl is None and out_ids is None:
        raise AdapterError(
            "SGLang response has " + ("text" if response.get("text") else "no output") +
            " but neither meta_info.output_token_logprobs nor output_ids: request it with "
            "return_logprob=true so the sampled token ids are recorded")
    if otl is not None:
        token_ids = token_ids_from([e[1] for e in otl], "meta_info.output_token_logprobs[*][1]")
        logprobs = np.asarray([engine_logprob(e[0], f"meta_info.output_token_logprobs[{i}][0]")
                               for i, e in enumerate(otl)], dtype=np.float32)
        if out_ids is not None:
            ref = token_ids_from(out_ids, "output_ids")
            if len(ref) != len(token_ids) or not np.array_equal(ref, token_ids):
                raise AdapterError("meta_info.output_token_logprobs token ids differ from output_ids")
    else:
        token_ids = token_ids_from(out_ids, "output_ids")
        logprobs = np.full(len(token_ids), np.nan, dtype=np.float32)
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):
        fr = fr.get("type")
    return ActionCall(
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=fr,
        text=response.get("text"),
        call_id=meta.get("id"),
        sampling=_sampling_from_request(request),
        usage=CallUsage.from_openai({"prompt_tokens": meta.get("prompt_tokens"),
                                     "completion_tokens": meta.get("completion_tokens"),
                                     "prompt_tokens_details": {"cached_tokens": meta.get("cached_tokens")}}),
    )


action_from_openai_completion = _malformed("OpenAI/vLLM completion", action_from_openai_completion)
action_from_sglang_generate = _malformed("SGLang /generate", action_from_sglang_generate)
