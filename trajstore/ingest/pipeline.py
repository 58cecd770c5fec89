"""`ingest_paths`: agent logs on disk -> trajectories in a store.

Reads every input unit (JSON, JSONL, Parquet, event directories), detects (or is told) the
format of each record, parses it into conversations, engine rollouts or text rollouts,
tokenizes the text with the tokenizer (conversations through its chat template), derives
deterministic ids, skips ids already stored and writes the rest through
:class:`~trajstore.writer.StoreWriter`. Whatever goes wrong with one record is that record's
:class:`~trajstore.ingest.core.Problem` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import ValidationError as PydanticValidationError

from trajstore.adapters import engine_logprob, token_ids_from
from trajstore.errors import AdapterError, TrajectoryValidationError, TrajstoreError, one_line
from trajstore.hub import SMOLLM2_ALIAS, load_tokenizer, resolve_model
from trajstore.ingest import (
    atif,
    chat_rows,
    detect,
    mini_swe_agent,
    nemo_gym,
    openhands_v0,
    openhands_v1,
    rollout_dumps,
    swe_agent,
    tau_bench,
)
from trajstore.ingest.core import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    Conversation,
    EngineRollout,
    Origin,
    Parsed,
    Problem,
    RecordError,
    TextRollout,
    _clip_value,
)
from trajstore.ingest.render import (
    content_hash,
    conversation_to_trajectories,
    created_at,
    reward_raw,
    rollout_to_trajectories,
    status_part,
    trajectory_id,
)
from trajstore.convert import trajectories_to_table
from trajstore.models import Span, Trajectory
from trajstore.reader import read_shard, read_trajectories
from trajstore.store import LOCKS_DIR, TRAJECTORIES_DIR, CorruptShardWarning, Store, open_store
from trajstore.validate import validate_trajectory
from trajstore.writer import DEFAULT_FLUSH_MB, DEFAULT_FLUSH_ROWS
from trajstore.writer import _approx_bytes as approx_bytes  # the SDK writer's flush sizing

try:
    import fcntl
except ImportError:  # not POSIX: ingest commits are not serialised (see store_lock)
    fcntl = None  # type: ignore[assignment]

ROW_PARSERS: dict[str, Callable[[Any, Origin], Parsed]] = {
    "openhands-v0-eval": openhands_v0.parse_eval_output,
    "openhands-v0-resolver": openhands_v0.parse_resolver_output,
    "openhands-v0-feedback": openhands_v0.parse_feedback_row,
    "openhands-swe-gym": openhands_v0.parse_swe_gym_row,
    "openhands-v1-eval": openhands_v1.parse_eval_output,
    "openhands-v1-completions": openhands_v1.parse_completion_log,
    "swe-agent": swe_agent.parse_traj,
    "nebius-swe-agent": swe_agent.parse_nebius_row,
    "nemo-gym": nemo_gym.parse_rollout,
    "mini-swe-agent": mini_swe_agent.parse_traj,
    "swe-smith": chat_rows.parse_swe_smith_row,
    "nebius-swe-rebench-openhands": chat_rows.parse_swe_rebench_openhands_row,
    "tau-bench": tau_bench.parse_result,
    "atif": atif.parse_trajectory,
    "verl-rollouts": rollout_dumps.parse_row,
    "chat-messages": chat_rows.parse_chat_record,
}
"""Formats whose records (a document, an array item or a JSONL line) are one trajectory each."""


REFUSING_KINDS = frozenset({"malformed", "invalid", "unsupported"})
"""Problem kinds that mean input was refused (``traj ingest`` exits 1); ``no_trajectory`` is a skip."""


class IngestError(TrajstoreError):
    """``strict`` ingest found problems; nothing was written. `report` lists them all."""

    def __init__(self, report: IngestReport):
        self.report = report
        shown = "\n".join(f"  - {p}" for p in report.problems[:10])
        more = f"\n  ... and {len(report.problems) - 10} more" if len(report.problems) > 10 else ""
        super().__init__(f"strict ingest: {len(report.problems)} problem(s), nothing written:\n{shown}{more}")


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped an ingest. Still a ``KeyboardInterrupt``; `report` says what was
    stored before it: every new shard appears atomically (temporary file renamed into place; one
    PUT on object stores) and what a non-strict ingest had buffered is flushed first, so the store holds whole
    trajectories only, ``report.trajectories_written`` of them from this ingest. Running the
    same ingest again adds the rest."""

    def __init__(self, report: IngestReport):
        super().__init__(f"ingest interrupted after storing {report.trajectories_written} trajectories")
        self.report = report


@dataclass
class IngestReport:
    """What an ingest did.

    Attributes:
        files_seen: input files read (each event file of an event store counts).
        trajectories_parsed: trajectories built from the input.
        trajectories_written: new rows written to the store.
        skipped: trajectories not written, by reason (``already_in_store``,
            ``duplicate_in_input``, ``superseded_completion_log``, ``invalid``).
        problems: input that yielded nothing (malformed / no_trajectory / invalid / unsupported).
        ignored_files: files a directory walk did not read, by suffix (``.md``, ``.png``, ...).
        by_format: trajectories parsed per input format.
        degraded_events: events of unknown kind rendered generically or skipped.
        truncated_observations: observations capped at ``max_observation_chars``.
        fidelity_gaps: trajectories per fidelity flag (metadata ``fidelity_gaps``: what the
            stored trajectory cannot reproduce of what the model was sent or generated).
        engine_ids_discarded: records whose engine token ids were not used (placeholder or
            partial ids, TokenEvents that do not line up): re-tokenized instead, metadata
            ``engine_token_ids_discarded`` says why.
        written_ids: ids of the rows written, in order.
    """

    files_seen: int = 0
    trajectories_parsed: int = 0
    trajectories_written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    ignored_files: Counter[str] = field(default_factory=Counter)
    by_format: Counter[str] = field(default_factory=Counter)
    degraded_events: int = 0
    truncated_observations: int = 0
    fidelity_gaps: Counter[str] = field(default_factory=Counter)
    engine_ids_discarded: int = 0
    written_ids: list[str] = field(default_factory=list)

    @property
    def refused(self) -> int:
        """Problems that refused input (malformed, invalid, unsupported). ``no_trajectory`` ones
        (score-only files, evaluator crash rows, metadata files) are deliberately skipped."""
        return sum(p.kind in REFUSING_KINDS for p in self.problems)

    @property
    def refused_by_kind(self) -> Counter[str]:
        """Refused input (:attr:`refused`) by problem kind (``malformed``, ``invalid``, ``unsupported``)."""
        return Counter(p.kind for p in self.problems if p.kind in REFUSING_KINDS)

    @property
    def skipped_inputs(self) -> int:
        """Input (files, rows) deliberately skipped because it holds no trajectory
        (``no_trajectory`` problems: score-only files, evaluator crash rows, metadata files)."""
        return sum(p.kind not in REFUSING_KINDS for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {"files_seen": self.files_seen, "trajectories_parsed": self.trajectories_parsed,
                "trajectories_written": self.trajectories_written, "refused": self.refused,
                "skipped": dict(self.skipped), "ignored_files": dict(self.ignored_files),
                "problems": [p.to_dict() for p in self.problems],
                "problems_by_kind": dict(Counter(p.kind for p in self.problems)),
                "refused_by_kind": dict(self.refused_by_kind), "skipped_inputs": self.skipped_inputs,
                "by_format": dict(self.by_format), "degraded_events": self.degraded_events,
                "truncated_observations": self.truncated_observations,
                "fidelity_gaps": dict(self.fidelity_gaps), "engine_ids_discarded": self.engine_ids_discarded}


# -- parsing -----------------------------------------------------------------------------------

EVENT_FORMATS = ("openhands-v1-events", "openhands-v0-events")
"""Formats whose records are the events of *one* conversation (a JSONL file of them is one trajectory)."""


FIELD_WORDS: dict[str, str] = {
    "reward": "the reward", "reward_raw": "the reward", "model": "the model name", "prompt_id": "the task id",
    "group_id": "the group id", "created_at": "the time stamp", "status": "the status",
    "tokens": "the token ids", "logprobs": "the log-probs", "spans": "the turns",
    "metadata": "the fields kept as metadata", "trajectory_id": "the instance id", "tokenizer": "the tokenizer name",
    "not_trainable_reason": "the not-trainable reason", "call_id": "a model call's id (response or message id)",
    "cause_id": "an observation's tool call id", "finish_reason": "a model call's finish_reason",
    "tool_call_ids": "a model call's tool call ids", "role": "a message's role",
}
"""Stored-trajectory fields in the words of the input they come from (never ``reward_raw``)."""


def _field_words(name: str, item: Any = None) -> str:
    head = re.split(r"[.\[]", name, maxsplit=1)[0]
    if head in ("reward", "reward_raw") and getattr(getattr(item, "reward", None), "field", None):
        return f"the reward (field {item.reward.field!r})"
    if head == "spans":
        m = re.match(r"spans\[(\d+)\]\.?(.*)", name)
        if m:
            return f"turn span {int(m.group(1)) + 1}" + (f" ({m.group(2)})" if m.group(2) else "")
    return FIELD_WORDS.get(head, name)


def _why(e: BaseException, item: Any = None) -> str:
    """The reason of a record's problem, on one line in the input's terms: a parser's own
    message; the broken rules of the trajectory built from the record (naming the input's
    field, e.g. the reward's ``resolved``, never a stored column such as ``reward_raw``); a
    pydantic error as ``field: message (got value)``; else the error's type and text."""
    if isinstance(e, RecordError):
        return one_line(str(e))
    if isinstance(e, TrajectoryValidationError):
        return "the trajectory built from it would be invalid: " + "; ".join(
            f"{_field_words(v.field, item)}: {one_line(v.message)}" for v in e.violations)
    if isinstance(e, PydanticValidationError):
        parts = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err.get("loc", ())) or "value"
            got = _clip_value(err.get("input"), 60)
            parts.append(f"{_field_words(loc, item)}: {err.get('msg', 'invalid')} (got {got})")
        return "; ".join(parts)
    return one_line(f"{type(e).__name__}: {e}")


def _parse_record(kind: str, origin: Origin, rec: Any) -> Parsed:
    """One record through its format's parser; any exception is this record's problem only."""
    try:
        return ROW_PARSERS[kind](rec, origin)
    except Exception as e:  # noqa: BLE001 - one bad record costs only itself (issue 12, item 6)
        return Problem(origin, "malformed", _why(e))


def _sniff(value: Any) -> str | None:
    return detect.detect_record(value) or detect.detect_event(value)


def _parse_rows(path: str, rows: Iterable[tuple[int, Any]], fmt: str, huge_ints: bool = False) -> Iterator[Parsed]:
    """The rows of a JSONL file, a JSON array or a Parquet shard (``(line, value)`` pairs).

    Each row's format is detected on its own, so one odd row never decides the file. A row of
    no known shape is parsed as the file's format (that of the first row that has one), so its
    problem names what it lacks; rows before that first recognised row wait for it. When the
    first recognised thing is an event, the whole file is one conversation's event list.
    With `huge_ints` (a JSON array holding integers too long to convert), a row holding one
    is refused naming its field and the others are parsed.
    """
    if huge_ints:
        rows = list(rows)
        bad = {n: hit for n, v in rows if (hit := detect.find_huge_int(v))}
        for n, hit in bad.items():
            yield Problem(Origin(path, n), "malformed", detect.huge_int_reason(hit))
        rows = [(n, v) for n, v in rows if n not in bad]
    if fmt in EVENT_FORMATS:
        yield from _parse_event_list(path, [v for _, v in rows], fmt)
        return
    file_kind = None if fmt == "auto" else fmt
    waiting: list[tuple[int, Any]] = []
    seen = 0
    it = iter(rows)
    for n, v in it:
        seen += 1
        kind = file_kind if fmt != "auto" else detect.detect_row(v)
        if kind is None and file_kind is None:
            ev = detect.detect_event(v)
            if ev is not None:  # a JSONL of events: one conversation
                yield from _parse_event_list(path, [w for _, w in waiting] + [v] + [w for _, w in it], ev)
                return
            waiting.append((n, v))
            continue
        if file_kind is None:
            file_kind = kind
            for wn, wv in waiting:
                yield _parse_record(file_kind, Origin(path, wn), wv)
            waiting = []
        yield _parse_record(kind or file_kind, Origin(path, n), v)
    if file_kind is None and waiting:
        n0, v0 = waiting[0]
        yield Problem(Origin(path, n0), "unsupported",
                      f"no record of a known shape among {seen} (keys of the first: {_keys(v0)}); "
                      "name the format with --input-format")


def _parse_event_list(path: str, events: list[Any], kind: str) -> Iterator[Parsed]:
    try:
        yield (openhands_v1.parse_persisted_events(events, Origin(path)) if kind == "openhands-v1-events"
               else openhands_v0.parse_event_list(events, Origin(path)))
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(path), "malformed", _why(e))


def parse_unit(unit: detect.InputUnit, fmt: str = "auto") -> Iterator[Parsed]:
    """Parse one input unit into conversations, engine rollouts and problems.

    Never raises for bad input: an unreadable file, line, row or event, and any exception a
    parser raises on one record, become a :class:`Problem` with the path, the line (JSONL line,
    array index + 1, Parquet row + 1) and the reason, and parsing goes on with the next record.
    """
    if unit.is_event_dir:
        yield from _parse_event_dir(unit, fmt)
        return
    path = unit.path
    if detect.is_parquet(path):
        try:
            yield from _parse_rows(path, detect.iter_parquet_rows(path), fmt)
        except Exception as e:  # noqa: BLE001 - an unreadable shard, or one that breaks mid-way
            yield Problem(Origin(path), "malformed", f"not valid Parquet: {_why(e)}")
        return
    try:
        loaded = detect.load_json_or_jsonl(path)
    except (ValueError, OSError) as e:
        yield Problem(Origin(path), "malformed", str(e))
        return
    yield from loaded.problems
    if loaded.lines is not None:  # JSONL: rows, or the events of one conversation
        yield from _parse_rows(path, loaded.lines, fmt)
        return
    try:
        yield from _parse_document(path, loaded.whole, fmt, loaded.huge_ints)
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(path), "malformed", _why(e))


def _parse_document(path: str, doc: Any, fmt: str, huge_ints: bool = False) -> Iterator[Parsed]:
    # a bare list of messages is one record, not rows (even when its first message is broken)
    one_chat = detect.is_chat(doc) or (fmt in ("auto", "chat-messages") and detect.is_message_list(doc))
    if huge_ints and (one_chat or not (isinstance(doc, list) and (fmt if fmt != "auto" else detect.detect_document(doc))
                                       in ROW_PARSERS)):
        hit = detect.find_huge_int(doc)
        yield Problem(Origin(path), "malformed", detect.huge_int_reason(hit) if hit else "an integer too long to read")
        return
    if isinstance(doc, list) and not doc:  # whatever the format: nothing to store, nothing wrong
        yield Problem(Origin(path), "no_trajectory", "an empty JSON array (no records)")
        return
    why_not = detect.not_a_trajectory(doc)
    if why_not and fmt == "auto":
        if os.path.basename(path).startswith("eval_"):
            task = openhands_v1.task_of(path, "eval_")
            traj = os.path.join(os.path.dirname(path), f"traj_{task}.json")
            if not os.path.exists(traj):
                why_not += f"; no traj_{task}.json next to it"
        yield Problem(Origin(path), "no_trajectory", why_not)
        return
    kind = fmt if fmt != "auto" else detect.detect_document(doc)
    if kind is None:
        yield Problem(Origin(path), "unsupported", f"unrecognised content (keys: {_keys(doc)}); "
                      "name the format with --input-format")
        return
    if kind == "chat-messages" and one_chat:
        yield _parse_record(kind, Origin(path), doc)
        return
    if kind in ROW_PARSERS:
        if isinstance(doc, list):
            yield from _parse_rows(path, ((i + 1, r) for i, r in enumerate(doc)), fmt, huge_ints)
        else:
            yield _parse_record(kind, Origin(path), doc)
        return
    if kind == "openhands-v1-events":
        name = os.path.basename(path)
        if name.startswith("traj_"):
            task = openhands_v1.task_of(path, "traj_")
            ev_path = os.path.join(os.path.dirname(path), f"eval_{task}.json")
            ev = None
            if os.path.exists(ev_path):
                try:
                    ev = detect.json_loads(detect.read_text(ev_path))
                except (ValueError, OSError) as e:
                    yield Problem(Origin(ev_path), "malformed", f"eval file cannot be read: {e}")
            yield openhands_v1.parse_task_trajectory(doc, Origin(path), ev, ev_path if ev is not None else None)
        else:
            yield openhands_v1.parse_persisted_events(doc, Origin(path))
    elif kind == "openhands-v0-events":
        yield openhands_v0.parse_event_list(doc, Origin(path))
    else:
        yield Problem(Origin(path), "unsupported", f"format {kind!r} does not apply to a single file")


def _keys(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(map(str, list(v)[:8])) or "an empty object"
    return f"a JSON {type(v).__name__}"


def _parse_event_dir(unit: detect.InputUnit, fmt: str) -> Iterator[Parsed]:
    events: list[Any] = []
    for f in unit.files:
        try:
            events.append(detect.json_loads(detect.read_text(f)))
        except (ValueError, OSError) as e:
            yield Problem(Origin(f), "malformed", f"event file is not valid JSON: {e}")
    if not events:
        return
    session_dir = os.path.dirname(unit.path)
    meta: dict[str, Any] = {}
    meta_path = os.path.join(session_dir, "metadata.json")
    if os.path.exists(meta_path):
        try:
            meta = detect.json_loads(detect.read_text(meta_path))
        except (ValueError, OSError) as e:
            yield Problem(Origin(meta_path), "malformed", f"session metadata is not valid JSON: {e}")
        if not isinstance(meta, dict):
            yield Problem(Origin(meta_path), "malformed", f"session metadata is a JSON {type(meta).__name__}, "
                          "not an object; ignored")
            meta = {}
    state: Any = None
    state_path = os.path.join(session_dir, "base_state.json")
    if os.path.exists(state_path):  # OpenHands V1 conversation folder
        try:
            state = detect.json_loads(detect.read_text(state_path))
        except (ValueError, OSError) as e:
            yield Problem(Origin(state_path), "malformed", f"conversation state is not valid JSON: {e}")
    key = str(meta.get("conversation_id") or os.path.basename(session_dir))
    kind = fmt if fmt != "auto" else detect.detect_event(next((e for e in events if isinstance(e, dict)), None))
    try:
        if kind == "openhands-v1-events":
            conv = openhands_v1.events_conversation(events, Origin(unit.path), source="openhands/v1-events", key=key)
        else:
            conv = openhands_v0.events_to_conversation(events, source="openhands/v0-session", key=key,
                                                       origin=Origin(unit.path))
    except Exception as e:  # noqa: BLE001
        yield Problem(Origin(unit.path), "malformed", _why(e))
        return
    if state is not None:
        openhands_v1.apply_base_state(conv, state)
    conv.model = meta["llm_model"] if isinstance(meta.get("llm_model"), str) else conv.model
    conv.metadata.update({k: meta[k] for k in ("conversation_id", "title", "trigger", "selected_repository")
                          if k in meta})
    yield conv


# -- building trajectories -----------------------------------------------------------------------

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

def check_engine_segments(r: EngineRollout) -> EngineRollout:
    """Check an engine rollout's numbers as the adapters check an engine response, in place:
    token ids are integers in [0, 2**31); log-probs are numbers, and a null / non-finite /
    -9999.0 stand-in log-prob becomes NaN (missing), never a value; an action whose log-probs
    are all missing has none (``logprobs = None``).

    Raises:
        RecordError: naming the segment and the position of the first bad value (a token id
            past int64, a log-prob that is a string, counts that differ).
    """
    if not r.segments:
        raise RecordError("the rollout has no token segments")
    for k, seg in enumerate(r.segments):
        where = f"segment {k} ({seg.kind}{' ' + str(seg.call_id) if seg.call_id else ''})"
        try:
            seg.token_ids = token_ids_from(seg.token_ids, f"{where} token ids").tolist()
            if seg.logprobs is None:
                continue
            if not isinstance(seg.logprobs, (list, tuple)) or len(seg.logprobs) != len(seg.token_ids):
                n = len(seg.logprobs) if isinstance(seg.logprobs, (list, tuple)) else "no"
                raise RecordError(f"{where}: {len(seg.token_ids)} token ids but {n} log-probs")
            lps = [engine_logprob(x, f"{where} log-prob [{i}]") for i, x in enumerate(seg.logprobs)]
            seg.logprobs = None if lps and all(math.isnan(x) for x in lps) else lps
        except AdapterError as e:
            raise RecordError(str(e)) from None
    return r


def text_rollout_to_trajectory(r: TextRollout, tokenizer: Any, *, tokenizer_name: str,
                               input_format: str) -> Trajectory:
    """Tokenize each segment of an already-rendered text rollout as it is (no chat template, no
    special tokens added) and make it one span.

    Returns:
        A validated :class:`Trajectory` with ``token_source = retokenized`` and ``logprob_source
        = none``; metadata ``special_tokens_in_text`` says whether the prompt text holds the
        tokenizer's special tokens (if not, the dump dropped them and the prompt ids differ from
        what the model saw).

    Raises:
        RecordError: a segment tokenizes to nothing.
        TrajectoryValidationError: the result breaks a schema rule.
    """
    ids: list[np.ndarray] = []
    spans: list[Span] = []
    pos = 0
    for k, seg in enumerate(r.segments):
        t = np.asarray(tokenizer(seg.text, add_special_tokens=False)["input_ids"], dtype=np.int32)
        if not len(t):
            raise RecordError(f"segment {k} ({seg.kind}) has no tokens")
        spans.append(Span(kind=seg.kind, start=pos, end=pos + len(t), role=seg.role))
        ids.append(t)
        pos += len(t)
    tokens = np.concatenate(ids)
    special = [x for x in getattr(tokenizer, "all_special_tokens", []) if x]
    digest = content_hash({"source": r.source, "key": r.key, "reward": reward_raw(r), **status_part(r),
                           "tokenizer": tokenizer_name,
                            "segments": [[s.kind, s.text] for s in r.segments]})
    meta = dict(r.metadata)
    meta["ingest"] = {"format": input_format, "path": r.origin.path, "line": r.origin.line, "render_method": "raw-text"}
    meta["special_tokens_in_text"] = any(x in r.segments[0].text for x in special)
    gaps = dict(r.fidelity_gaps)
    if not meta["special_tokens_in_text"]:
        gaps["special_tokens"] = ("the prompt text holds none of the tokenizer's special tokens: the dump dropped "
                                  "them (skip_special_tokens), so the prompt ids differ from what the model saw")
    if gaps:
        meta["fidelity_gaps"] = gaps
    if r.reward.error:
        meta["reward_error"] = r.reward.error
    traj = Trajectory(
        trajectory_id=trajectory_id(r.source, r.key, digest), prompt_id=r.prompt_id, source=r.source, model=r.model,
        tokenizer=tokenizer_name, created_at=created_at(r), status=r.status, reward=r.reward.value,
        reward_raw=reward_raw(r), token_source="retokenized", logprob_source="none", tokens=tokens,
        logprobs=np.full(len(tokens), np.nan, dtype=np.float32), spans=spans, metadata=meta)
    return validate_trajectory(traj)


@dataclass(frozen=True)
class IngestProgress:
    """Where an ingest stands, passed to the ``progress`` callback after every input unit and
    every trajectory built.

    Attributes:
        files_done / files_total: input units read (a file, or an event-store directory).
        records: trajectories built so far.
        problems: problems found so far (refused and skipped input).
        tokens: tokens in the trajectories built so far.
        refused: of `problems`, those that refused input (see :attr:`IngestReport.refused`).
    """

    files_done: int
    files_total: int
    records: int
    problems: int
    tokens: int
    refused: int = 0


def iter_trajectories(paths: list[str], *, input_format: str = "auto", tokenizer: str = SMOLLM2_ALIAS,
                      max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                      engine_tokenizer: str | None = None,
                      report: IngestReport | None = None,
                      progress: Callable[[IngestProgress], None] | None = None) -> Iterator[Trajectory]:
    """Parse and tokenize everything under `paths`, yielding trajectories (problems go to `report`).

    One bad record costs only itself: whatever goes wrong while reading, parsing or building one
    record (a row, a line, an event file, a document) becomes a :class:`Problem` with its path,
    line and reason, and the ingest goes on with the next record and file.

    Args:
        paths: files and directories (searched recursively for :data:`~trajstore.ingest.detect.INPUT_SUFFIXES`).
        input_format: ``auto`` (detected per record) or one of :data:`~trajstore.ingest.detect.FORMATS`
            for every input.
        tokenizer: name for :func:`trajstore.hub.load_tokenizer` (loaded on first text-only input).
        max_observation_chars: cap per observation (characters); None = no cap.
        engine_tokenizer: the tokenizer engine token ids belong to when the log does not name
            it (``"model"`` = each rollout's model name); None = such rollouts are stored as
            not trainable (see :func:`~trajstore.ingest.render.rollout_to_trajectories`).
        progress: called with an :class:`IngestProgress` after every unit and trajectory.

    Raises:
        ValueError: unknown `input_format`.
        TrajstoreError: the tokenizer cannot be loaded (it is needed by every text-only record).
    """
    if input_format != "auto" and input_format not in detect.FORMATS:
        raise ValueError(f"unknown input format {input_format!r}; choose auto or one of {', '.join(detect.FORMATS)}")
    report = report if report is not None else IngestReport()
    units, problems = detect.discover(paths, report.ignored_files)
    report.problems.extend(problems)
    tok = None
    tok_name = resolve_model(tokenizer).name
    completion_logs: list[Conversation] = []
    tokens = 0

    def build(item: Conversation | EngineRollout | TextRollout) -> list[Trajectory]:
        nonlocal tok, tokens
        if not isinstance(item, EngineRollout) and tok is None:
            tok = load_tokenizer(tokenizer)  # outside the per-record guard: a missing tokenizer stops the ingest
        try:
            try:
                ts = build_one(item)
            except Exception:  # an unpaired surrogate in the text (hashing, tokenizing, storing fail on it)?
                n = replace_surrogates(item)
                if not n:
                    raise
                item.fidelity_gaps["unpaired_surrogates"] = (
                    f"{n} unpaired UTF-16 surrogate(s) in the log's text (e.g. an emoji cut in half by the harness's "
                    "truncation, written as a lone \\udXXX escape) replaced by U+FFFD")
                ts = build_one(item)
        except Exception as e:  # noqa: BLE001 - one bad record costs only itself
            report.problems.append(Problem(item.origin, "invalid", _why(e, item)))
            return []
        report.trajectories_parsed += len(ts)
        report.by_format[item.source] += len(ts)
        for t in ts:
            report.fidelity_gaps.update(list(t.metadata.get("fidelity_gaps") or {}))
            tokens += len(t.tokens)
        return ts

    def build_one(item: Conversation | EngineRollout | TextRollout) -> list[Trajectory]:
        if isinstance(item, EngineRollout):
            ts = rollout_to_trajectories(check_engine_segments(item), input_format=item.source,
                                         engine_tokenizer=engine_tokenizer)
        elif isinstance(item, TextRollout):
            ts = [text_rollout_to_trajectory(item, tok, tokenizer_name=tok_name, input_format=item.source)]
        else:
            ts = conversation_to_trajectories(item, tok, tokenizer_name=tok_name, input_format=item.source,
                                              max_observation_chars=max_observation_chars)
            report.truncated_observations += len(ts[0].metadata.get("truncated_observations", []))
            report.degraded_events += item.degraded_events
            report.engine_ids_discarded += "engine_token_ids_discarded" in item.metadata
        return ts

    def tick(done: int) -> None:
        if progress:
            progress(IngestProgress(done, len(units), report.trajectories_parsed, len(report.problems), tokens,
                                    report.refused))

    for n, unit in enumerate(units):
        report.files_seen += len(unit.files) if unit.is_event_dir else 1
        try:
            for item in parse_unit(unit, input_format):
                if isinstance(item, Problem):
                    report.problems.append(item)
                elif isinstance(item, Conversation) and item.source == "openhands/v1-completions":
                    completion_logs.append(item)  # resolved once the whole directory is read
                else:
                    for t in build(item):
                        yield t
                        tick(n)
        except TrajstoreError:
            raise
        except Exception as e:  # noqa: BLE001 - a fault outside any one record: the rest of this file is lost
            report.problems.append(Problem(Origin(unit.path), "malformed", f"reading stopped: {_why(e)}"))
        tick(n + 1)
    kept, superseded = openhands_v1.drop_superseded(completion_logs)
    report.skipped["superseded_completion_log"] += len(superseded)
    for c in kept:
        for t in build(c):
            yield t
            tick(len(units))


def ingest_paths(paths: list[str] | str, store: Store | str, *, input_format: str = "auto",
                 tokenizer: str = SMOLLM2_ALIAS, strict: bool = False,
                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                 engine_tokenizer: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 progress: Callable[[IngestProgress], None] | None = None) -> IngestReport:
    """Ingest agent logs into a store; re-ingesting the same input writes nothing new.

    Args:
        paths: files or directories of logs.
        store: a :class:`~trajstore.store.Store` or URI (local path or ``s3://bucket/prefix``).
        input_format: ``auto`` (detected per record) or a name from :data:`~trajstore.ingest.detect.FORMATS`.
        tokenizer: tokenizer for text-only formats (default SmolLM2-135M-Instruct).
        strict: any problem in the input fails the ingest with nothing written.
        max_observation_chars: cap per observation, characters (None = no cap).
        engine_tokenizer: see :func:`iter_trajectories`.
        storage_options: fsspec options when `store` is a URI (s3fs: key, secret, endpoint_url).
        progress: called with an :class:`IngestProgress` as the ingest advances.

    Returns:
        An :class:`IngestReport` (``report.refused`` > 0: some record was refused; every other
        record was still written).

    Raises:
        IngestError: with ``strict``, when any problem was found (nothing written).
        ValueError: unknown `input_format`.
        TrajstoreError: the tokenizer cannot be loaded, or the store cannot be read or written.
    """
    if max_observation_chars is not None and max_observation_chars < 0:
        raise ValueError(f"max_observation_chars must be >= 0 (None = no cap), got {max_observation_chars}")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    st = store if isinstance(store, Store) else open_store(store, storage_options=storage_options)
    report = IngestReport()
    commit = StoreCommitter(st, report)
    seen: set[str] = set()
    trajs = iter_trajectories(paths, input_format=input_format, tokenizer=tokenizer,
                              max_observation_chars=max_observation_chars, engine_tokenizer=engine_tokenizer,
                              report=report, progress=progress)
    pending: list[Trajectory] = []
    try:
        for t in trajs:
            if t.trajectory_id in commit.existing:
                report.skipped["already_in_store"] += 1
                continue
            if t.trajectory_id in seen:
                report.skipped["duplicate_in_input"] += 1
                continue
            seen.add(t.trajectory_id)
            if strict:
                pending.append(t)
            else:
                commit.add(t)
    except BaseException as e:
        if not strict:  # what was built before the failure is still stored (re-ingest adds the rest)
            with contextlib.suppress(Exception):
                commit.flush()
        if isinstance(e, KeyboardInterrupt) and not isinstance(e, IngestInterrupted):
            report.trajectories_written = len(report.written_ids)
            raise IngestInterrupted(report) from e
        raise
    if strict and report.problems:
        raise IngestError(report)
    try:
        for t in pending:
            commit.add(t)
        commit.flush()
    except KeyboardInterrupt as e:  # strict: the shards committed so far are whole; say how many
        report.trajectories_written = len(report.written_ids)
        raise IngestInterrupted(report) from e
    report.trajectories_written = len(report.written_ids)
    report.skipped = Counter({k: v for k, v in report.skipped.items() if v})
    return report


INGEST_LOCK = "ingest"
"""Name of the store lock every ingest commit holds (:func:`store_lock`)."""


@contextlib.contextmanager
def store_lock(st: Store, name: str = INGEST_LOCK) -> Iterator[None]:
    """Hold an exclusive, blocking lock named `name` on the store `st`.

    Local stores: ``fcntl.flock`` on ``<root>/_locks/<name>.lock`` (every process and thread
    on this host, and on hosts sharing the folder over a filesystem with working ``flock``,
    such as NFSv4 on Linux). Object stores (S3) have no lock: the lock file is in this host's
    temporary folder, named after the store's URL, so it serialises the holders of one host
    only. The lock is released when the block ends, or when the process dies.
    """
    if fcntl is None:  # no flock on this platform: commits are not serialised
        yield
        return
    if st.is_local:
        d, fname = st.path(LOCKS_DIR), f"{name}.lock"
    else:
        d = os.path.join(tempfile.gettempdir(), "trajstore-locks")
        fname = f"{hashlib.sha256(st.url().encode()).hexdigest()[:24]}.{name}.lock"
    try:
        os.makedirs(d, exist_ok=True)
        fd = os.open(os.path.join(d, fname), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:  # the store's folder cannot be created or written: one line naming it
        raise st.write_refused(e) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class StoreCommitter:
    """Writes an ingest's new trajectories as shards so that an ingest run twice at once (two
    processes, two threads) stores each trajectory once.

    Trajectories are buffered (:data:`~trajstore.writer.DEFAULT_FLUSH_ROWS` rows or
    :data:`~trajstore.writer.DEFAULT_FLUSH_MB` MiB, as the writer SDK does); each commit takes
    the store's ingest lock (:func:`store_lock`), reads the ids of the shards that appeared
    since its last look, drops what is now stored (counted as ``already_in_store``) and writes
    the rest as one atomic shard before releasing the lock.

    Guarantees: on a local store, concurrent ingests never store an id twice. On an object
    store, ingests on one host are serialised the same way; ingests on different hosts can
    still both store a trajectory that neither saw when it committed (the window is one
    listing plus one PUT): readers keep the first copy only (``read_trajectories`` dedupes by
    id) and ``traj info`` counts duplicates.

    Attributes:
        existing: ids stored when last looked (plus those this committer wrote).
    """

    def __init__(self, st: Store, report: IngestReport, *, flush_rows: int = DEFAULT_FLUSH_ROWS,
                 flush_mb: float = DEFAULT_FLUSH_MB):
        self.st = st
        self.report = report
        self.flush_rows = flush_rows
        self.flush_bytes = int(flush_mb * 2**20)
        self._buf: list[Trajectory] = []
        self._buf_bytes = 0
        st.clean_stale_tmp()  # leftovers of killed writers (an hour old, never in use)
        self._known = {s.name for s in st.list_shards()}
        self.existing: set[str] = set(read_trajectories(st, columns=["trajectory_id"])
                                      .column("trajectory_id").to_pylist())

    def _look(self) -> None:
        """Add the ids of shards that appeared since the last look to :attr:`existing`."""
        for s in self.st.list_shards():
            if s.name in self._known:
                continue
            self._known.add(s.name)
            try:
                ids = read_shard(self.st, s, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
            except (OSError, pa.ArrowException) as e:
                warnings.warn(f"skipping {self.st.url_of(s.path)}: cannot read its ids ({type(e).__name__}: {e})",
                              CorruptShardWarning, stacklevel=2)
                continue
            self.existing.update(ids)

    def add(self, t: Trajectory) -> None:
        """Buffer one (already validated) trajectory; commit when the buffer is full."""
        self._buf.append(t)
        self._buf_bytes += approx_bytes(t)
        if len(self._buf) >= self.flush_rows or self._buf_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Commit the buffer: under the store lock, drop what another ingest stored meanwhile
        and write the rest as one shard.

        Raises:
            StoreError: the shard could not be written (nothing of the buffer is stored).
        """
        if not self._buf:
            return
        with store_lock(self.st):
            self._look()
            fresh = [t for t in self._buf if t.trajectory_id not in self.existing]
            if fresh:
                path = self.st.write_table(trajectories_to_table(fresh), subdir=TRAJECTORIES_DIR)
                self._known.add(path.rsplit("/", 1)[-1])
                self.existing.update(t.trajectory_id for t in fresh)
        self.report.skipped["already_in_store"] += len(self._buf) - len(fresh)
        self.report.written_ids.extend(t.trajectory_id for t in fresh)
        self._buf, self._buf_bytes = [], 0
