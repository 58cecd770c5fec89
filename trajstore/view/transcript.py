"""One trajectory's transcript as people read it: its spans decoded to text with their fields,
tool calls matched to the observations that answer them, and the flags of what ingest
approximated or the row lacks. Shared by ``traj view``'s page and ``traj show``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajstore.view.decode import Decoder
from trajstore.wording import MARKED_NOT_TRAINABLE, TEXT_ONLY, WITHOUT_REWARD


@dataclass
class SpanView:
    """One span as the page shows it (offsets into the trajectory's tokens, ``end`` exclusive).

    Attributes:
        answers: for an action, ``(tool call id, index of the observation span that answers it or
            None)`` per tool call. answered: for an observation, the index of the action span
            whose call or tool call it answers (its ``cause_id``), or None.
    """

    index: int
    kind: str
    role: str | None
    start: int
    end: int
    text: str
    fields: dict[str, Any]
    answers: list[tuple[str, int | None]] = field(default_factory=list)
    answered: int | None = None



def span_views(raw: list[dict[str, Any]], tokens: list[int], tok: Any, decoder: Decoder) -> list[SpanView]:
    """The stored spans (`raw`, the ``spans`` column of one row) as shown: each span's text decoded
    with `tok` (token ids without one), its non-empty fields, and which observation answers which
    tool call (``cause_id`` against ``call_id`` / ``tool_call_ids``)."""
    shown = ("policy_version", "policy_version_max", "call_id", "cause_id", "tool_call_ids", "finish_reason",
             "temperature", "top_p", "top_k", "max_tokens", "truncated", "num_missing_logprobs")
    spans = [SpanView(i, s["kind"], s.get("role"), s["start"], s["end"], decoder.text(tok, tokens[s["start"]:s["end"]]),
                      {k: s.get(k) for k in shown if s.get(k) not in (None, [])})
             for i, s in enumerate(raw)]
    # tool-call ids (and call ids) of actions -> the observations that answer them (cause_id)
    action_of: dict[str, int] = {}
    for sp in spans:
        if sp.kind == "action":
            for cid in [*(sp.fields.get("tool_call_ids") or []), sp.fields.get("call_id")]:
                if cid:
                    action_of.setdefault(cid, sp.index)
    answer_of: dict[str, int] = {}
    for sp in spans:
        cause = sp.fields.get("cause_id")
        if sp.kind == "observation" and cause:
            sp.answered = action_of.get(cause)
            answer_of.setdefault(cause, sp.index)
    for sp in spans:
        if sp.kind == "action":
            sp.answers = [(cid, answer_of.get(cid)) for cid in sp.fields.get("tool_call_ids") or []]
    return spans


def trajectory_flags(row: dict[str, Any], spans: list[dict[str, Any]], metadata: dict[str, Any] | None
                     ) -> list[tuple[str, str]]:
    """(name, what it means) of what ingest approximated or the row lacks (re-tokenized ids, no
    engine log-probs, no reward, no policy version, mixed-version actions, capped observations,
    the fidelity gaps the metadata records)."""
    flags: list[tuple[str, str]] = []
    if row.get("token_source") == "retokenized":
        flags.append(("retokenized", f"token ids re-tokenized from the logged text with the chat template of "
                                     f"{row.get('tokenizer')}: not the ids the engine sampled"))
    if row.get("logprob_source") == "none":
        flags.append(("no engine log-probs", "the log has no rollout log-prob"))
    elif row.get("num_missing_logprobs"):
        flags.append(("missing log-probs", f"{row['num_missing_logprobs']} action tokens without an engine log-prob"))
    if not row.get("trainable", True):
        flags.append(("not trainable", f"{MARKED_NOT_TRAINABLE}: {row.get('not_trainable_reason') or 'no reason stored'}"))
    elif "logprob_source" in row and (row["logprob_source"] != "engine" or row.get("token_source") != "engine"):
        # stored trainable, but traj train refuses it without the option (stats --coverage: the same words)
        flags.append(("text only", f"trainable = true, but {TEXT_ONLY} (traj train computes its behaviour "
                                   "log-probs with the initial weights)"))
    if row.get("reward") is None:
        flags.append(("no reward", f"no reward was logged: traj train skips it ({WITHOUT_REWARD})"))
    if row.get("num_actions") and row.get("min_policy_version") is None:
        flags.append(("no policy version", "the actions carry no policy version: their staleness is undefined"))
    mixed = sum(1 for s in spans if s.get("policy_version_max") is not None)
    if mixed:
        flags.append(("mixed-version actions", f"{mixed} action spans made by several policy versions (counted at "
                                               "the oldest)"))
    capped = sum(1 for s in spans if s.get("truncated"))
    if capped:
        flags.append(("observations capped", f"{capped} observation spans cut at ingest (sizes in the metadata)"))
    meta = metadata or {}
    for name, why in (meta.get("fidelity_gaps") or {}).items():
        flags.append((f"gap: {name}", str(why)))
    for key in ("engine_token_ids_discarded", "engine_token_ids"):
        if meta.get(key):
            flags.append((key.replace("_", " "), str(meta[key])))
    if meta.get("policy_version_known") is False:
        flags.append(("policy version unknown", "the log never recorded which policy version made the actions"))
    return flags
