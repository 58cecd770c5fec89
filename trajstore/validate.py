"""Write-time rules of schema v4. Every broken rule of a trajectory is collected and reported
together in one :class:`~trajstore.errors.TrajectoryValidationError`. Rules that need other
trajectories (a child's parent exists, its fork point is within the parent) are
:func:`lineage_violations`'."""

from __future__ import annotations

import json
import math
import re

import numpy as np

from trajstore.errors import TrajectoryValidationError, Violation
from trajstore.models import Span, Trajectory
from trajstore.schema import LINK_KINDS, LOGPROB_MODES, LOGPROB_SOURCES, SPAN_KINDS, STATUSES, TOKEN_SOURCES

TRAJECTORY_ID_MAX_CHARS = 200
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TRAJECTORY_STR_FIELDS = ("prompt_id", "group_id", "source", "model", "tokenizer", "reward_raw", "episode_id",
                          "parent_trajectory_id", "link_kind")
_SPAN_STR_FIELDS = ("role", "call_id", "cause_id", "finish_reason", "sampling_params")
_SPAN_INT64_FIELDS = ("start", "end", "policy_version", "top_k", "max_tokens", "policy_version_max")
_SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:=+-]*")  # fullmatch: `$` would accept a trailing "\n"


def check_trajectory_id(trajectory_id: str | None) -> list[Violation]:
    """Rules for ids: non-empty, at most 200 characters of ``[A-Za-z0-9._:=+-]``, not starting
    with a dot or dash, so an id is safe as a file or object-key component."""
    if not trajectory_id:
        return [Violation("trajectory_id", "must be a non-empty string")]
    if len(trajectory_id) > TRAJECTORY_ID_MAX_CHARS:
        return [Violation("trajectory_id", f"longer than {TRAJECTORY_ID_MAX_CHARS} characters")]
    if not _SAFE_ID.fullmatch(trajectory_id):
        return [Violation(
            "trajectory_id",
            f"{trajectory_id!r} is not safe in a path: use letters, digits and ._:=+- "
            "and do not start with '.' or '-'",
        )]
    return []


def _not_utf8(value: str | None) -> bool:
    """True when `value` cannot be stored as an Arrow/Parquet string (e.g. lone surrogates)."""
    if value is None or value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not standard JSON")


_STRICT_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def _parse_json(text: str) -> tuple[object, str | None]:
    """(value, None) for one standard JSON value (NaN / Infinity refused), else (None, why)."""
    try:
        return _STRICT_JSON.decode(text), None
    except ValueError as e:
        return None, str(e).splitlines()[0]
    except RecursionError:
        return None, "nested too deeply"


def _json_problem(text: str) -> str | None:
    """Why `text` is not one standard JSON value (NaN / Infinity refused), or None."""
    return _parse_json(text)[1]


def _clip(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _sampling_violations(where: str, s: Span, parsed: dict[str, tuple[object, str | None]]) -> list[Violation]:
    """Rules for the sampling parameters an action span records (they change what its
    log-probs mean, so an impossible value is refused rather than stored). `parsed` caches
    ``sampling_params`` texts already parsed (spans of one trajectory usually share one)."""
    v: list[Violation] = []
    if s.temperature is not None and not (s.temperature >= 0 and math.isfinite(s.temperature)):
        v.append(Violation(f"{where}.temperature", f"must be finite and >= 0, got {s.temperature}"))
    if s.top_p is not None and not (0 < s.top_p <= 1):
        v.append(Violation(f"{where}.top_p", f"must be in (0, 1], got {s.top_p}"))
    if s.min_p is not None and not (0 <= s.min_p <= 1):
        v.append(Violation(f"{where}.min_p", f"must be finite and in [0, 1], got {s.min_p}"))
    if s.top_k is not None and s.top_k < -1:
        v.append(Violation(f"{where}.top_k", f"must be -1 or 0 (disabled) or >= 1, got {s.top_k}"))
    if s.logprob_mode is not None and s.logprob_mode not in LOGPROB_MODES:
        v.append(Violation(f"{where}.logprob_mode", f"{s.logprob_mode!r} is not one of {list(LOGPROB_MODES)}"))
    elif s.logprob_mode is not None and s.kind != "action":
        v.append(Violation(f"{where}.logprob_mode", f"only action spans have log-probs ({s.kind})"))
    if s.max_tokens is not None and s.max_tokens < 1:
        v.append(Violation(f"{where}.max_tokens", f"must be >= 1, got {s.max_tokens}"))
    if s.sampling_params is not None:
        if s.sampling_params not in parsed:
            parsed[s.sampling_params] = _parse_json(s.sampling_params)
        value, problem = parsed[s.sampling_params]
        if problem:
            v.append(Violation(f"{where}.sampling_params",
                               f"is not valid JSON ({problem}): {_clip(s.sampling_params)}"))
        elif not isinstance(value, dict):
            v.append(Violation(f"{where}.sampling_params",
                               f"must be a JSON object, got {_clip(s.sampling_params)}"))
    return v


def _storability_violations(traj: Trajectory) -> list[Violation]:
    """Values the models accept but Arrow cannot store: strings that are not valid UTF-8,
    integers outside int64, metadata that is not JSON-serialisable. Caught here so that one
    such trajectory can never fail a later flush (and block the writer's whole buffer)."""
    v: list[Violation] = []
    for name in _TRAJECTORY_STR_FIELDS:
        if _not_utf8(getattr(traj, name)):
            v.append(Violation(name, "is not valid UTF-8 (lone surrogate?)"))
    if traj.metadata:
        try:
            json.dumps(traj.metadata, sort_keys=True, default=str, allow_nan=False)
        except ValueError as e:
            if "not JSON compliant" in str(e):
                v.append(Violation("metadata", "holds NaN or Infinity, which is not standard JSON "
                                               "(store null or a string instead)"))
            else:
                v.append(Violation("metadata", f"is not JSON-serialisable: {e}"))
        except (TypeError, RecursionError) as e:
            v.append(Violation("metadata", f"is not JSON-serialisable: {e}"))
    if traj.reward_raw is not None:
        problem = _json_problem(traj.reward_raw)
        if problem:
            v.append(Violation("reward_raw", f"is not valid JSON ({problem}): {_clip(traj.reward_raw)}"))
    for i, s in enumerate(traj.spans):
        for name in _SPAN_STR_FIELDS:
            if _not_utf8(getattr(s, name)):
                v.append(Violation(f"spans[{i}].{name}", "is not valid UTF-8 (lone surrogate?)"))
        if s.tool_call_ids and any(_not_utf8(x) for x in s.tool_call_ids):
            v.append(Violation(f"spans[{i}].tool_call_ids", "is not valid UTF-8 (lone surrogate?)"))
        for name in _SPAN_INT64_FIELDS:
            x = getattr(s, name)
            if x is not None and not (_INT64_MIN <= x <= _INT64_MAX):
                v.append(Violation(f"spans[{i}].{name}", f"{x} does not fit in int64"))
    return v


def _own_lineage_violations(traj: Trajectory) -> list[Violation]:
    """The lineage rules one trajectory can be checked by alone: ``parent_trajectory_id``,
    ``link_kind`` and ``fork_point`` all set (a child) or all null (a root); a parent id that is
    a valid id and not the trajectory's own; a known link kind; 0 <= fork_point <= its own
    tokens; a non-empty ``episode_id`` when set."""
    v: list[Violation] = []
    parent, kind, fork = traj.parent_trajectory_id, traj.link_kind, traj.fork_point
    if traj.episode_id is not None and not traj.episode_id:
        v.append(Violation("episode_id", "must be a non-empty string or null (null: its own episode)"))
    if kind is not None and kind not in LINK_KINDS:
        v.append(Violation("link_kind", f"{kind!r} is not one of {list(LINK_KINDS)}"))
    if parent is None:
        if kind is not None:
            v.append(Violation("link_kind", f"is {kind!r} but there is no parent_trajectory_id (a root has no link)"))
        if fork is not None:
            v.append(Violation("fork_point", f"is {fork} but there is no parent_trajectory_id (a root has no fork point)"))
        return v
    v += [Violation("parent_trajectory_id", x.message) for x in check_trajectory_id(parent)]
    if parent == traj.trajectory_id:
        v.append(Violation("parent_trajectory_id", "is the trajectory's own id"))
    if kind is None:
        v.append(Violation("link_kind", f"is null but parent_trajectory_id is {parent!r}: name the link "
                                        f"({' | '.join(LINK_KINDS)})"))
    if fork is None:
        v.append(Violation("fork_point", f"is null but parent_trajectory_id is {parent!r}: give the number of "
                                         "leading tokens shared with the parent (0 for none)"))
    elif fork < 0:
        v.append(Violation("fork_point", f"must be >= 0, got {fork}"))
    elif fork > len(traj.tokens):
        v.append(Violation("fork_point", f"{fork} is past the trajectory's own end ({len(traj.tokens)} tokens)"))
    return v


def lineage_violations(traj: Trajectory, parent_num_tokens: int | None) -> list[Violation]:
    """Rules linking a child to its parent: the parent exists (`parent_num_tokens` is None when it
    is neither in the same write nor in the store) and ``fork_point`` is not past its end.
    Empty for a root.

    Args:
        traj: the trajectory (its own rules, :func:`find_violations`, checked already).
        parent_num_tokens: the parent's ``num_tokens``, or None when the parent was not found.
    """
    parent = traj.parent_trajectory_id
    if parent is None:
        return []
    if parent_num_tokens is None:
        return [Violation("parent_trajectory_id", f"{parent!r} is neither in the same write nor in the store "
                                                  "(write the parent first or in the same call)")]
    if traj.fork_point is not None and traj.fork_point > parent_num_tokens:
        return [Violation("fork_point", f"{traj.fork_point} is past the end of parent {parent!r} "
                                        f"({parent_num_tokens} tokens)")]
    return []


def find_violations(traj: Trajectory) -> list[Violation]:
    """All schema-v4 rules ``traj`` breaks, in a stable order; empty when it is valid.

    The one rule set for trajectories: the SDK's :func:`validate_trajectory` calls it before a
    write, and ``traj validate`` (:mod:`trajstore.validation.rows`) on every stored row, rebuilt
    with the SDK's full-length log-probs. It only reads attributes of ``traj`` and its spans.
    """
    v: list[Violation] = check_trajectory_id(traj.trajectory_id)
    if not traj.source:
        v.append(Violation("source", "must be a non-empty string"))
    if traj.status not in STATUSES:
        v.append(Violation("status", f"{traj.status!r} is not one of {list(STATUSES)}"))
    if traj.token_source not in TOKEN_SOURCES:
        v.append(Violation("token_source", f"{traj.token_source!r} is not one of {list(TOKEN_SOURCES)}"))
    if traj.logprob_source not in LOGPROB_SOURCES:
        v.append(Violation("logprob_source", f"{traj.logprob_source!r} is not one of {list(LOGPROB_SOURCES)}"))
    if traj.token_source == "retokenized" and traj.logprob_source == "engine":
        v.append(Violation("logprob_source", "retokenized trajectories cannot carry engine log-probs"))
    if traj.reward is not None and not math.isfinite(traj.reward):
        v.append(Violation("reward", f"must be finite or null, got {traj.reward}"))
    v += _storability_violations(traj)
    if traj.fork_point is not None and not (_INT64_MIN <= traj.fork_point <= _INT64_MAX):
        v.append(Violation("fork_point", f"{traj.fork_point} does not fit in int64"))
    else:
        v += _own_lineage_violations(traj)

    tokens, logprobs = traj.tokens, traj.action_logprobs
    n = len(tokens)
    if len(logprobs) != n:
        v.append(Violation("action_logprobs", f"length {len(logprobs)} != length of tokens {n}"))
    if n and int(tokens.min()) < 0:
        bad = int(np.flatnonzero(tokens < 0)[0])
        v.append(Violation("tokens", f"token ids must be >= 0 (tokens[{bad}] = {int(tokens[bad])})"))

    # engine log-probs need the version that produced them, unless the trajectory says its logs
    # never recorded one (ingested NeMo Gym / ATIF rollouts): then its staleness is undefined
    unknown_version = isinstance(traj.metadata, dict) and traj.metadata.get("policy_version_known") is False
    # Span coverage: ordered, contiguous, non-empty, exactly [0, n).
    action = np.zeros(n, dtype=bool)
    parsed: dict[str, tuple[object, str | None]] = {}
    pos = 0
    for i, s in enumerate(traj.spans):
        where = f"spans[{i}]"
        if s.kind not in SPAN_KINDS:
            v.append(Violation(f"{where}.kind", f"{s.kind!r} is not one of {list(SPAN_KINDS)}"))
        if s.start != pos:
            what = "gap" if s.start > pos else "overlap"
            v.append(Violation(f"{where}.start", f"{what}: starts at {s.start}, previous span ended at {pos}"))
        if s.end <= s.start:
            v.append(Violation(f"{where}.end", f"end {s.end} must be > start {s.start} (no empty spans)"))
        if s.end > n:
            v.append(Violation(f"{where}.end", f"end {s.end} is past the last token ({n} tokens)"))
        pos = max(pos, s.end)
        if s.kind == "action":
            if 0 <= s.start < s.end:
                action[s.start:min(s.end, n)] = True
            if traj.logprob_source == "engine" and s.policy_version is None and not unknown_version:
                v.append(Violation(f"{where}.policy_version", "action span without a policy version (logs that "
                                   "never recorded one say so with metadata policy_version_known: false)"))
        elif s.policy_version is not None:
            v.append(Violation(f"{where}.policy_version", f"only action spans carry a policy version ({s.kind})"))
        if s.policy_version is not None and s.policy_version < 0:
            v.append(Violation(f"{where}.policy_version", f"must be >= 0, got {s.policy_version}"))
        if s.policy_version_max is not None:
            if s.kind != "action" or s.policy_version is None:
                v.append(Violation(f"{where}.policy_version_max", "only an action span with a policy_version can "
                                   "be flagged as mixed-version"))
            elif s.policy_version_max <= s.policy_version:
                v.append(Violation(f"{where}.policy_version_max", f"must be > policy_version {s.policy_version} "
                                   f"(the oldest version of a mixed-version span), got {s.policy_version_max}"))
        v += _sampling_violations(where, s, parsed)
    if pos != n and n:
        v.append(Violation("spans", f"spans cover tokens [0, {pos}) but there are {n} tokens"))
    if n and not traj.spans:
        v.append(Violation("spans", f"{n} tokens but no spans"))

    if len(logprobs) == n and n:
        known = ~np.isnan(logprobs)
        outside = known & ~action
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            v.append(Violation("action_logprobs", f"must be null outside action spans ({int(outside.sum())} "
                                           f"non-null, first at token {i})"))
        if traj.logprob_source == "engine":
            act_lp = logprobs[action]
            infinite = np.isinf(act_lp)
            if infinite.any():
                i = int(np.flatnonzero(action)[np.flatnonzero(infinite)[0]])
                v.append(Violation("action_logprobs", f"{int(infinite.sum())} action token(s) have an infinite log-prob "
                                               f"(first at token {i}: {float(logprobs[i])}); store an unknown "
                                               "log-prob as NaN/None, never a stand-in value"))
            if len(act_lp) and np.isnan(act_lp).all():
                v.append(Violation("action_logprobs", "logprob_source is engine but no action token has a log-prob "
                                               "(use logprob_source 'none')"))
            below = act_lp < MIN_SAMPLED_LOGPROB  # NaN compares False
            if below.any():
                i = int(np.flatnonzero(action)[np.flatnonzero(below)[0]])
                v.append(Violation("action_logprobs", f"{int(below.sum())} action token(s) have a log-prob below "
                                               f"{MIN_SAMPLED_LOGPROB:g} nats (first at token {i}: "
                                               f"{float(logprobs[i])}): a sampled token cannot be that unlikely; "
                                               "it is an engine's stand-in (vLLM writes -9999.0 for -inf): store "
                                               "an unknown log-prob as NaN/None, never a stand-in value"))
            positive = np.isfinite(act_lp) & (act_lp > 0)
            if positive.any():
                i = int(np.flatnonzero(action)[np.flatnonzero(positive)[0]])
                v.append(Violation("action_logprobs", f"log-probs must be <= 0 ({int(positive.sum())} positive, "
                                               f"first at token {i}: {float(logprobs[i])})"))
        elif known.any():
            v.append(Violation("action_logprobs", "logprob_source is 'none' but some log-probs are set"))
    return v


MIN_SAMPLED_LOGPROB: float = -1000.0
"""The lowest log-prob (nats) a sampled action token may have. exp(-746) is already 0 in float64
(and exp(-104) in float32), so an engine cannot have sampled a token below it: such a value is
a stand-in for "impossible" (vLLM's -9999.0 clamp of -inf), refused like -inf."""


def validate_trajectory(traj: Trajectory) -> Trajectory:
    """Return ``traj`` unchanged if it satisfies schema v4 (its own rules; the writer also checks
    :func:`lineage_violations` against the same write and the store).

    Log-probs (the SDK model holds them full length, NaN = none): known only at action tokens,
    each <= 0 and finite. With ``logprob_source = engine`` an action token may be NaN (the engine
    gave no value for it: stored as NaN and counted in ``num_missing_logprobs``, so the trainer
    and the audits see it), but not every one of them; with ``none`` every one is NaN.

    Raises:
        TrajectoryValidationError: listing every rule broken, naming the trajectory and field.
    """
    violations = find_violations(traj)
    if violations:
        raise TrajectoryValidationError(traj.trajectory_id, violations)
    return traj
