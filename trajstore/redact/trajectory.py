"""Secrets in one trajectory, and the trajectory rewritten without them.

Each span's token ids are decoded through the trajectory's own tokenizer (the bytes of each id,
:class:`~trajstore.redact.tokentext.TokenBytes`), so every character of a secret maps to the token
that holds it. The tokens covering a secret are replaced by the tokens of the marker
``[REDACTED:<kind>]`` (with whatever else those tokens held before and after the secret, so no
other text is lost); every later span is shifted, the log-probs stay aligned with the action tokens
(a marker's tokens inside an action have none: NaN), and the change is recorded in the trajectory's
``metadata.redaction``. Strings in ``metadata`` and ``reward_raw`` are scrubbed as text.

Trainability: an action whose context (the tokens before it) changed keeps its tokens and
log-probs, but those log-probs were sampled under the original text, so the trajectory is marked
not trainable unless ``keep_trainable``; an action that itself held a secret always makes it not
trainable (the schema marks trainability per trajectory; ``metadata.redaction`` lists the actions).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from trajstore.errors import TrajstoreError
from trajstore.models import Trajectory
from trajstore.redact.report import Finding
from trajstore.redact.rules import MARKER_FORMAT, Match, RedactConfig, Rules, excerpt, marker
from trajstore.redact.tokentext import TokenBytes, char_to_byte, token_bytes_for
from trajstore.redact.values import StringHit, scrub_json
from trajstore.validate import validate_trajectory

REDACTION_KEY = "redaction"
"""The metadata key of the redaction record (see :meth:`Redactor.redact`)."""


@dataclass(frozen=True)
class _SpanHit:
    """The secrets of one span: `matches` (character ranges of `text`, the span's decoded text)
    with the covering token range of each, and the span's byte offset in the trajectory."""

    span: int
    span_kind: str
    text: str
    byte0: int
    c2b: np.ndarray | None
    matches: list[Match]
    tokens: list[tuple[int, int]]

    def byte_range(self, m: Match) -> tuple[int, int]:
        if self.c2b is None:
            return self.byte0 + m.start, self.byte0 + m.end
        return self.byte0 + int(self.c2b[m.start]), self.byte0 + int(self.c2b[m.end])


@dataclass(frozen=True)
class TrajectoryScan:
    """The secrets of one trajectory (:meth:`Redactor.scan`).

    Attributes:
        findings: spans first (in span order), then metadata, then the raw reward.
        unscanned: why the spans were not scanned (no tokenizer, unloadable tokenizer), else None.
    """

    findings: list[Finding]
    unscanned: str | None


@dataclass(frozen=True)
class Redacted:
    """A trajectory rewritten without its secrets (:meth:`Redactor.redact`).

    Attributes:
        trajectory: the new trajectory (valid; same id, spans and span count).
        changes: each secret replaced, with its old and new token ranges.
        made_not_trainable: it was trainable before and is not any more.
        unscanned: why its spans were not scanned, else None (metadata and reward were).
    """

    trajectory: Trajectory
    changes: list[Finding]
    made_not_trainable: bool
    unscanned: str | None


class Redactor:
    """Scans and rewrites trajectories with the rules of one :class:`RedactConfig`.

    Tokenizers are loaded by name (the trajectory's ``tokenizer`` column, or ``config.tokenizer``
    for rows without one) through :func:`trajstore.hub.load_tokenizer`, once each.
    """

    def __init__(self, config: RedactConfig | None = None):
        self.config = config or RedactConfig()
        self.rules = Rules(self.config)
        self._tokenizers: dict[str, TokenBytes | str] = {}

    # -- tokenizers ---------------------------------------------------------------------------------

    def token_bytes(self, name: str | None) -> TokenBytes | str:
        """The :class:`TokenBytes` of tokenizer `name` (None: ``config.tokenizer``), or why there is none."""
        name = name or self.config.tokenizer
        if name is None:
            return "no tokenizer recorded (pass a tokenizer for such rows: traj redact --tokenizer NAME)"
        if name not in self._tokenizers:
            try:
                self._tokenizers[name] = token_bytes_for(name)
            except TrajstoreError as e:
                self._tokenizers[name] = f"tokenizer {name!r} cannot be loaded: {e}"
        return self._tokenizers[name]

    def unscanned(self, t: Trajectory) -> str | None:
        """Why `t`'s spans cannot be scanned (no tokenizer, or one that cannot be loaded), else None."""
        tb = self.token_bytes(t.tokenizer)
        return tb if isinstance(tb, str) else None

    # -- scanning -----------------------------------------------------------------------------------

    def _span_hits(self, t: Trajectory, tb: TokenBytes) -> list[_SpanHit]:
        tokens = np.asarray(t.tokens)
        blob = tb.bytes_of(tokens)
        off = tb.offsets(tokens)
        hits = []
        for k, s in enumerate(t.spans):
            b0, b1 = int(off[s.start]), int(off[s.end])
            text = blob[b0:b1].decode("utf-8", "surrogateescape")
            matches = self.rules.find(text)
            if not matches:
                continue
            c2b = char_to_byte(text)
            hit = _SpanHit(k, s.kind, text, b0, c2b, matches, [])
            for m in matches:
                hit.tokens.append(_covering(blob, off, *hit.byte_range(m), s.start, s.end))
            hits.append(hit)
        return hits

    def _json_hits(self, t: Trajectory) -> tuple[dict, list[StringHit], object, list[StringHit]]:
        ours = _is_record(t.metadata.get(REDACTION_KEY))  # our own record holds no secret; anything else is scanned
        meta, meta_hits = scrub_json(t.metadata, self.rules, skip_keys=frozenset({REDACTION_KEY} if ours else ()))
        reward, reward_hits = (None, [])
        if t.reward_raw is not None:
            reward, reward_hits = scrub_json(json.loads(t.reward_raw), self.rules)
        return meta, meta_hits, reward, reward_hits

    def scan(self, t: Trajectory) -> TrajectoryScan:
        """Every secret in `t`'s spans, metadata and raw reward (nothing is changed)."""
        findings: list[Finding] = []
        tb = self.token_bytes(t.tokenizer)
        unscanned = tb if isinstance(tb, str) else None
        if not isinstance(tb, str):
            for h in self._span_hits(t, tb):
                findings += [Finding(t.trajectory_id, m.kind, "span", h.span, h.span_kind, None, (m.start, m.end),
                                     tok, excerpt=excerpt(h.text, h.matches, i))
                             for i, (m, tok) in enumerate(zip(h.matches, h.tokens))]
        _, meta_hits, _, reward_hits = self._json_hits(t)
        findings += _json_findings(t.trajectory_id, "metadata", meta_hits)
        findings += _json_findings(t.trajectory_id, "reward_raw", reward_hits)
        return TrajectoryScan(findings, unscanned)

    # -- rewriting ----------------------------------------------------------------------------------

    def redact(self, t: Trajectory) -> Redacted | None:
        """`t` without its secrets, or None when it has none (see the module docstring).

        The new trajectory's ``metadata.redaction`` records: ``marker`` (the marker's format),
        ``changes`` (each secret replaced: kind, where, span or JSON path, character range, old
        and new token ranges; never the secret; appended to the record of earlier redactions),
        ``redacted_actions`` (indices of action spans that held a secret), ``context_changed_actions``
        (action spans after a changed span) and ``keep_trainable``.

        Raises:
            TrajectoryValidationError: the rewritten trajectory breaks a schema rule (a bug: the
                stored trajectory is then left as it was).
        """
        tb = self.token_bytes(t.tokenizer)
        unscanned = tb if isinstance(tb, str) else None
        span_hits = [] if isinstance(tb, str) else self._span_hits(t, tb)
        meta, meta_hits, reward, reward_hits = self._json_hits(t)
        if not span_hits and not meta_hits and not reward_hits:
            return None
        update: dict = {}
        changes: list[Finding] = []
        redacted_actions: list[int] = []
        context_changed: list[int] = []
        if span_hits:
            assert isinstance(tb, TokenBytes)
            tokens, logprobs, spans, changes = _rewrite_spans(t, tb, span_hits)
            update.update(tokens=tokens, action_logprobs=logprobs, spans=spans)
            first = min(h.span for h in span_hits)
            changed = {h.span for h in span_hits}
            redacted_actions = [k for k in sorted(changed) if t.spans[k].kind == "action"]
            context_changed = [k for k, s in enumerate(t.spans) if s.kind == "action" and k > first
                               and k not in changed]
            if t.logprob_source == "engine" and np.isnan(logprobs).all():
                update["logprob_source"] = "none"  # every sampled token was a secret: no log-prob is left
        changes += _json_findings(t.trajectory_id, "metadata", meta_hits)
        changes += _json_findings(t.trajectory_id, "reward_raw", reward_hits)
        changes = [dataclasses.replace(c, excerpt="") for c in changes]
        if reward_hits:
            update["reward_raw"] = json.dumps(reward)
        was_trainable = t.not_trainable_reason is None and any(s.kind == "action" for s in t.spans)
        reason = _untrainable_reason(redacted_actions, context_changed, self.config.keep_trainable)
        if reason is not None and t.not_trainable_reason is None:
            update["not_trainable_reason"] = reason
        meta = dict(meta)
        before = t.metadata.get(REDACTION_KEY) if _is_record(t.metadata.get(REDACTION_KEY)) else {}
        meta[REDACTION_KEY] = {
            "marker": MARKER_FORMAT,
            "changes": [*before.get("changes", []), *(c.record() for c in changes)],
            "redacted_actions": sorted({*before.get("redacted_actions", []), *redacted_actions}),
            "context_changed_actions": sorted({*before.get("context_changed_actions", []), *context_changed}),
            "keep_trainable": self.config.keep_trainable,
        }
        update["metadata"] = meta
        new = validate_trajectory(t.model_copy(update=update))
        return Redacted(new, changes, was_trainable and new.not_trainable_reason is not None, unscanned)

    def redact_or_same(self, t: Trajectory) -> Trajectory:
        """`t` without its secrets (`t` itself when it has none): what ``traj proxy --redact`` stores."""
        r = self.redact(t)
        return t if r is None else r.trajectory


def _is_record(value: object) -> bool:
    """Whether a ``metadata.redaction`` value is a record :meth:`Redactor.redact` wrote."""
    return isinstance(value, dict) and value.get("marker") == MARKER_FORMAT and isinstance(value.get("changes"), list)


def _covering(blob: bytes, off: np.ndarray, bs: int, be: int, lo: int, hi: int) -> tuple[int, int]:
    """Token range ``[ts, te)`` within ``[lo, hi)`` whose bytes cover ``blob[bs:be]``, widened to
    whole UTF-8 characters (a token may end inside a character)."""
    ts = max(lo, int(np.searchsorted(off, bs, "right")) - 1)
    te = min(hi, max(ts + 1, int(np.searchsorted(off, be, "left"))))
    n = len(blob)
    while ts > lo and off[ts] < n and 0x80 <= blob[off[ts]] < 0xC0:
        ts -= 1
    while te < hi and off[te] < n and 0x80 <= blob[off[te]] < 0xC0:
        te += 1
    return ts, te


def _edits(tb: TokenBytes, t: Trajectory, hits: list[_SpanHit]) -> list[tuple[int, int, int, np.ndarray, list]]:
    """Replacements in token order: (span, ts, te, new ids, [(hit, match index)]); overlapping
    covering ranges of one span are one replacement holding each of their markers."""
    tokens = np.asarray(t.tokens)
    off = tb.offsets(tokens)
    blob = tb.bytes_of(tokens)
    out = []
    for h in hits:
        groups: list[list] = []
        for i, (ts, te) in enumerate(h.tokens):
            if groups and ts < groups[-1][1]:
                groups[-1][1] = max(groups[-1][1], te)
                groups[-1][2].append(i)
            else:
                groups.append([ts, te, [i]])
        for ts, te, members in groups:
            pieces, pos = [], int(off[ts])
            for i in members:
                bs, be = h.byte_range(h.matches[i])
                pieces += [blob[pos:bs], marker(h.matches[i].kind).encode()]
                pos = be
            pieces.append(blob[pos:int(off[te])])
            text = b"".join(pieces).decode("utf-8", "replace")  # partial characters only at a span's edge
            ids, _ = tb.encode_exact(text)
            out.append((h.span, ts, te, ids, [(h, i) for i in members]))
    return out


def _rewrite_spans(t: Trajectory, tb: TokenBytes, hits: list[_SpanHit]
                   ) -> tuple[np.ndarray, np.ndarray, list, list[Finding]]:
    """New tokens (int32 (T',)), full-length log-probs (float32 (T',), NaN outside actions and
    at markers), spans and changes of `t` with the tokens covering each secret replaced."""
    tokens = np.asarray(t.tokens)
    lps = np.asarray(t.action_logprobs)
    edits = _edits(tb, t, hits)
    new_tok, new_lp, spans, changes = [], [], [], []
    pos = 0          # old token index copied up to
    shift = 0        # new index - old index at `pos`
    ei = 0
    for k, s in enumerate(t.spans):
        start = s.start + shift
        while ei < len(edits) and edits[ei][0] == k:
            _, ts, te, ids, members = edits[ei]
            new_tok += [tokens[pos:ts], ids]
            new_lp += [lps[pos:ts], np.full(len(ids), np.nan, dtype=np.float32)]
            n0 = ts + shift
            for h, i in members:
                m = h.matches[i]
                changes.append(Finding(t.trajectory_id, m.kind, "span", k, s.kind, None, (m.start, m.end),
                                       h.tokens[i], (n0, n0 + len(ids))))
            shift += len(ids) - (te - ts)
            pos = te
            ei += 1
        new_tok.append(tokens[pos:s.end])
        new_lp.append(lps[pos:s.end])
        pos = s.end
        spans.append(s.model_copy(update={"start": start, "end": s.end + shift}))
    return (np.concatenate(new_tok).astype(np.int32), np.concatenate(new_lp).astype(np.float32), spans, changes)


def _json_findings(tid: str, where: str, hits: list[StringHit]) -> list[Finding]:
    return [Finding(tid, m.kind, where, None, None, h.path, (m.start, m.end),  # type: ignore[arg-type]
                    excerpt=excerpt(h.text, h.matches, i))
            for h in hits for i, m in enumerate(h.matches)]


def _untrainable_reason(redacted: list[int], context_changed: list[int], keep_trainable: bool) -> str | None:
    """The not-trainable reason a redaction gives, or None when every action stays trainable."""
    if redacted:
        return (f"redacted: {len(redacted)} action(s) held a secret (spans {redacted}); their tokens were "
                "replaced by a marker the policy never sampled")
    if context_changed and not keep_trainable:
        return (f"redacted: the context of {len(context_changed)} action(s) changed; their log-probs were "
                "sampled under the original text (traj redact --keep-trainable keeps them)")
    return None
