"""The stored fields every trajectory builder derives alike from a parsed record: its
deterministic id (source, key, content digest; ``:part<n>`` and metadata ``episode`` for the
parts of a split episode), the lineage of those parts, the raw reward, the time, and the
model-call count check.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from datetime import datetime, timezone
from typing import Any

import numpy as np

from trajstore.ingest.records import ParsedTrajectory
from trajstore.models import Trajectory


def content_hash(payload: Any) -> str:
    """Short stable digest of a JSON-able payload (20 hex characters)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:20]


def trajectory_id(source: str, key: str | None, digest: str) -> str:
    """``<source>:<key>:<digest>`` (``<source>:<digest>`` without a key), safe as a path component."""
    return f"{slug(source)}:{slug(key)}:{digest}" if key else f"{slug(source)}:{digest}"


_SLUG = re.compile(r"[^A-Za-z0-9._=+-]+")


def slug(s: str, max_chars: int = 80) -> str:
    """`s` reduced to characters safe in a trajectory id (others become ``-``)."""
    out = _SLUG.sub("-", s).strip("-.")
    return out[:max_chars] or "x"


def part_id(base_id: str, part: int, parts: int) -> str:
    """The id of part `part` (from 1) of an episode split into `parts` trajectories: the episode's
    id when it is whole, else ``<base_id>:part<part>``."""
    return base_id if parts == 1 else f"{base_id}:part{part}"


def episode(base_id: str, part: int, parts: int, change: str | None) -> dict[str, Any]:
    """Metadata ``episode`` of one part of a split episode: ``{"id", "part", "parts", "change"}``
    (`part` from 1; `change`: why this part starts a new context, None for the first)."""
    return {"id": base_id, "part": part, "parts": parts, "change": change}


LINK_KIND_OF_CHANGE: dict[str, str] = {
    "condensation": "context_rewrite",    # OpenHands V0 CondensationAction / V1 Condensation
    "summarization": "context_rewrite",   # Harbor Terminus-2 summarisation handoff (ATIF)
    "history-processor": "context_rewrite",  # SWE-agent history processors
    "reasoning-dropped": "context_rewrite",  # a harness that does not send earlier reasoning back
    "template": "context_rewrite",        # the chat template re-renders earlier turns
    "engine-prompt": "context_rewrite",   # an engine prompt that does not extend the one before
}
"""The ``link_kind`` of a part that starts a new context within one log, by its metadata
``episode.change``. Every such split is the same agent going on with a context it was given
instead of the previous one (nothing in one log is a retry or a sub-agent), so every change,
those not listed too (a changed system prompt or tool list, ...), is ``context_rewrite``."""


def link_kind_of(change: str | None) -> str:
    """The ``link_kind`` of a split part whose new context has `change` (:data:`LINK_KIND_OF_CHANGE`)."""
    return LINK_KIND_OF_CHANGE.get(change or "", "context_rewrite")


def shared_prefix(child: Trajectory, parent: Trajectory) -> int:
    """The ``fork_point`` of `child` under `parent`: how many leading token ids the two share
    (0 when their tokenizers differ: equal ids of two vocabularies are not shared text)."""
    if child.tokenizer != parent.tokenizer:
        return 0
    a, b = np.asarray(child.tokens), np.asarray(parent.tokens)
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def link_parts(parts: list[Trajectory], changes: list[str | None], episode_id: str) -> None:
    """Lineage of the parts of one split record, in place: all are of episode `episode_id` (the
    record's base id, as metadata ``episode.id``); part n > 1 is the child of part n - 1 (``link_kind`` by its change,
    :func:`link_kind_of`; ``fork_point`` = the tokens it shares with it). A whole record (one
    part) is its own episode, as every plain trajectory."""
    if len(parts) < 2:
        return
    for n, t in enumerate(parts):
        t.episode_id = episode_id
        if n:
            t.parent_trajectory_id = parts[n - 1].trajectory_id
            t.link_kind = link_kind_of(changes[n])
            t.fork_point = shared_prefix(t, parts[n - 1])


def status_part(t: ParsedTrajectory) -> dict[str, str]:
    """The status as part of a trajectory's identity (the same turns that ended submitted or cut
    by a limit are two outcomes); ``completed`` adds nothing, so earlier ids stay the same."""
    return {} if t.status == "completed" else {"status": t.status}


def _standard_json(v: Any) -> Any:
    """`v` with every NaN / infinite float replaced by its name as a string (``"NaN"``), so it
    serialises as standard JSON (a raw score object of an evaluator may hold NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v) if not math.isnan(v) else "NaN"
    if isinstance(v, dict):
        return {k: _standard_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_standard_json(x) for x in v]
    return v


def reward_raw(conv: ParsedTrajectory) -> str | None:
    """The raw reward as standard JSON (None when there is neither a raw value nor a reward;
    NaN / infinities inside a raw score object become strings, see :func:`_standard_json`)."""
    r = conv.reward
    if r.raw is None and r.value is None:
        return None
    raw = r.raw if r.raw is not None else r.value
    try:
        return json.dumps(raw, sort_keys=True, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_standard_json(raw), sort_keys=True, default=str, allow_nan=False)


def created_at(conv: ParsedTrajectory) -> datetime:
    """The trajectory's time: the last logged event's, else the file's modification time, else now."""
    if conv.created_at is not None:
        return conv.created_at
    try:
        return datetime.fromtimestamp(os.path.getmtime(conv.origin.path), tz=timezone.utc)
    except OSError:
        return datetime.now(timezone.utc)


def check_call_count(item: ParsedTrajectory, calls: int, gaps: dict[str, str]) -> None:
    """Flag a log whose model calls differ from the harness's own count (metadata
    ``harness_model_calls``, e.g. SWE-agent's ``api_calls``)."""
    n = item.metadata.get("harness_model_calls")
    if isinstance(n, int) and n != calls:
        gaps.setdefault("model_calls", f"the harness counted {n} model calls, the log holds {calls}")
