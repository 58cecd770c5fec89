"""Parsed records -> validated trajectories for one ingest: each record goes to the builder of
its kind (conversation, engine rollout, text rollout), text holding unpaired UTF-16 surrogates
is repaired and flagged, and whatever else goes wrong is that record's problem only.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from trajstore.hub import load_tokenizer, resolve_model
from trajstore.ingest.builders.conversation import conversation_to_trajectories
from trajstore.ingest.builders.engine import check_engine_segments, rollout_to_trajectories
from trajstore.ingest.builders.text import text_rollout_to_trajectory
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Conversation, EngineRollout, Origin, Problem, StoredRow, TextRollout
from trajstore.ingest.summary import ENGINE_IDS_DISCARDED, ENGINE_IDS_DISCARDED_KEY, IngestReport
from trajstore.ingest.values import blank_to_none
from trajstore.models import Trajectory

_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(item: Any) -> int:
    """Replace every unpaired UTF-16 surrogate (a lone ``\\udXXX`` JSON escape: not text, and
    neither hashable as UTF-8, tokenizable nor storable) in the strings of a parsed record by
    U+FFFD, in place: dataclass fields (the origin excepted), list items, dict keys and values.

    Returns:
        The number of surrogates replaced (0: nothing changed).
    """
    seen: set[int] = set()

    def fix(v: Any) -> tuple[Any, int]:
        if isinstance(v, str):
            n = len(_SURROGATE.findall(v)) if not v.isascii() else 0
            return (_SURROGATE.sub("\ufffd", v), n) if n else (v, 0)
        if isinstance(v, (list, dict)) or dataclasses.is_dataclass(v):
            if id(v) in seen:
                return v, 0
            seen.add(id(v))
        total = 0
        if isinstance(v, list):
            for i, x in enumerate(v):
                new, n = fix(x)
                if n:
                    v[i], total = new, total + n
        elif isinstance(v, dict):
            for k in list(v):
                new, n = fix(v[k])
                nk, nn = fix(k)
                if n or nn:
                    if nn:
                        del v[k]
                    v[nk], total = new, total + n + nn
        elif isinstance(v, tuple):
            parts = [fix(x) for x in v]
            total = sum(n for _, n in parts)
            if total:
                v = tuple(x for x, _ in parts)
        elif dataclasses.is_dataclass(v) and not isinstance(v, (type, Origin)):
            for f in dataclasses.fields(v):
                new, n = fix(getattr(v, f.name))
                if n:
                    setattr(v, f.name, new)
                    total += n
        return v, total

    return fix(item)[1]


class IngestBuilder:
    """Builds the trajectories of one ingest's parsed records and counts them into its report.

    Args:
        report: where built trajectories, their formats, fidelity gaps and problems are counted.
        tokenizer: name for :func:`trajstore.hub.load_tokenizer`, loaded on the first record
            that is not an engine rollout (a tokenizer that cannot be loaded stops the ingest).
        max_observation_chars: cap per observation (characters); None = no cap.
        engine_tokenizer: see :func:`~trajstore.ingest.builders.engine.rollout_to_trajectories`.
        train_reconstructed_actions: see :func:`~trajstore.ingest.builders.conversation.conversation_to_trajectories`.

    Attributes:
        tokens: tokens in the trajectories built so far.
    """

    def __init__(self, report: IngestReport, *, tokenizer: str, max_observation_chars: int | None,
                 engine_tokenizer: str | None, train_reconstructed_actions: bool = False):
        self.report = report
        self.tokenizer = tokenizer
        self.tokenizer_name = resolve_model(tokenizer).name
        self.max_observation_chars = max_observation_chars
        self.engine_tokenizer = engine_tokenizer
        self.train_reconstructed_actions = train_reconstructed_actions
        self.tok: Any = None
        self.tokens = 0

    def build(self, item: Conversation | EngineRollout | TextRollout | StoredRow) -> list[Trajectory]:
        """The trajectories of one parsed record; [] when it fails (then it is a problem of the report).
        A :class:`StoredRow` is already a checked trajectory: passed on as it is (no tokenizer)."""
        report = self.report
        if isinstance(item, StoredRow):
            report.trajectories_parsed += 1
            report.by_format[item.source] += 1
            self.tokens += len(item.trajectory.tokens)
            return [item.trajectory]
        # an empty model name or task id in a log means unknown: stored as null, in every format
        item.model, item.prompt_id = blank_to_none(item.model), blank_to_none(item.prompt_id)
        if not isinstance(item, EngineRollout) and self.tok is None:
            # outside the per-record guard: a missing tokenizer stops the ingest
            self.tok = load_tokenizer(self.tokenizer)
        try:
            try:
                ts = self._build_one(item)
            except Exception:  # an unpaired surrogate in the text (hashing, tokenizing, storing fail on it)?
                n = replace_surrogates(item)
                if not n:
                    raise
                item.fidelity_gaps["unpaired_surrogates"] = (
                    f"{n} unpaired UTF-16 surrogate(s) in the log's text (e.g. an emoji cut in half by the harness's "
                    "truncation, written as a lone \\udXXX escape) replaced by U+FFFD")
                ts = self._build_one(item)
        except Exception as e:  # noqa: BLE001 - one bad record costs only itself
            report.problems.append(Problem(item.origin, "invalid", problem_reason(e, item)))
            return []
        report.trajectories_parsed += len(ts)
        report.by_format[item.source] += len(ts)
        for t in ts:
            report.fidelity_gaps.update(list(t.metadata.get("fidelity_gaps") or {}))
            self.tokens += len(t.tokens)
        return ts

    def _build_one(self, item: Conversation | EngineRollout | TextRollout) -> list[Trajectory]:
        report = self.report
        if isinstance(item, EngineRollout):
            ts = rollout_to_trajectories(check_engine_segments(item), input_format=item.source,
                                         engine_tokenizer=self.engine_tokenizer)
        elif isinstance(item, TextRollout):
            ts = [text_rollout_to_trajectory(item, self.tok, tokenizer_name=self.tokenizer_name,
                                             input_format=item.source)]
        else:
            why = item.metadata.get(ENGINE_IDS_DISCARDED_KEY)
            if why:  # one name for every discard: the flag traj stats --coverage lists, the summary's count
                item.fidelity_gaps.setdefault(ENGINE_IDS_DISCARDED, str(why))
            ts = conversation_to_trajectories(item, self.tok, tokenizer_name=self.tokenizer_name,
                                              input_format=item.source,
                                              max_observation_chars=self.max_observation_chars,
                                              train_reconstructed_actions=self.train_reconstructed_actions)
            report.truncated_observations += len(ts[0].metadata.get("truncated_observations", []))
            report.degraded_events += item.degraded_events
            report.engine_ids_discarded += len(ts) if ENGINE_IDS_DISCARDED in item.fidelity_gaps else 0
        return ts
