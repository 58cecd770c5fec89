"""The one rule that admits a stored trajectory to training. The pre-flight census and the stream
both get their decisions from :func:`decide_rows`: same columns read, same ``--where`` scope,
same order of checks, so what the census counts is what the stream trains."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

from trajstore.reader import read_shard
from trajstore.reader.span_fields import read_span_fields
from trajstore.sampling import REFUSALS, REMEDIES, SAMPLING_SPAN_FIELDS, trajectory_refusals
from trajstore.store import ShardInfo, Store
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data.columns import read_scalar_columns
from trajstore.trainer.data.errors import TrainDataError
from trajstore.trainer.data.where import WhereFilter
from trajstore.wording import MARKED_NOT_TRAINABLE, UNREPRODUCIBLE_LOGPROBS, WITHOUT_ENGINE_LOGPROB, WITHOUT_REWARD

ADMISSION_COLUMNS: Final[tuple[str, ...]] = (
    "trajectory_id", "trainable", "tokenizer", "reward", "num_tokens", "logprob_source", "token_source",
    "num_action_tokens", "num_missing_logprobs")
"""The scalar columns the rule reads."""

SkipReason = Literal["duplicate", "where", "not_trainable", "no_reward", "overlong", "no_logprobs"] | str
"""Why a row is not trained; ``unreproducible_<reason>`` for the reasons of :data:`trajstore.sampling.REFUSALS`."""

UNREPRODUCIBLE = "unreproducible_"
"""Prefix of the skip reasons of rows whose log-probs the trainer cannot reproduce."""

SKIP_REASONS: Final[dict[str, str]] = {
    "duplicate": "duplicate ids",
    "where": "filtered by --where",
    "not_trainable": MARKED_NOT_TRAINABLE,
    "no_reward": WITHOUT_REWARD,
    "overlong": "longer than --max-seq-len",
    "no_logprobs": WITHOUT_ENGINE_LOGPROB,
    **{UNREPRODUCIBLE + r: f"{UNREPRODUCIBLE_LOGPROBS} ({words})" for r, words in REFUSALS.items()},
}
"""Each :data:`SkipReason` in words (a skipped row is counted as ``data/skipped_<reason>``)."""


class Admission(NamedTuple):
    """The rule's decision on one row of a shard.

    Fields:
        row: index of the row in its shard (0-based).
        trajectory_id: the row's id.
        skip: why the row is not trained, or None: admitted.
        text_only: admitted without engine log-probs (``--behaviour-logprobs initial-policy``).
        place: ``trajectory 'id' (shard name, row n)``, for messages.
        refused_spans: with an ``unreproducible_*`` skip, the indices of the spans refused.
    """

    row: int
    trajectory_id: str
    skip: SkipReason | None
    text_only: bool
    place: str
    refused_spans: tuple[int, ...] = ()


def is_text_only(row: Mapping[str, Any]) -> bool:
    """True when the row's tokens or log-probs did not come from the rollout engine (a text log,
    retokenized): DIS has no behaviour log-prob for it."""
    return row["logprob_source"] != "engine" or row["token_source"] != "engine"


class AdmissionRule:
    """Whether a row is trained, checked in this order (the first that applies decides):

    1. ``duplicate``: its id was seen before (the first copy in arrival order wins).
    2. ``where``: the ``--where`` predicate leaves it out.
    3. ``not_trainable``: stored ``trainable = false`` (its tokenizer is then never checked).
    4. a ``tokenizer`` other than the model's is refused (a null one is trained as the model's,
       with one warning).
    5. ``no_reward``: a null or NaN reward.
    6. ``overlong``: more than ``max_seq_len`` tokens; refused instead with ``overlong="error"``.
    7. text-only (:func:`is_text_only`) is refused unless ``behaviour_logprobs="initial-policy"``.
    8. ``no_logprobs``: an engine row with no engine log-prob on any action token (the stream
       leaves an action token without one out of the action mask, so nothing would train).
    9. ``unreproducible_<reason>``: an engine row with an action span whose log-probs the trainer
       cannot reproduce (:func:`trajstore.sampling.span_refusal`: raw-mode log-probs of a tempered
       or truncated call, penalties, grammars, ...); the reason of its first such span. With
       ``unreproducible="error"`` the callers stop on it (:func:`unreproducible_error`), with
       ``"skip"`` it is counted and left out.

    Args:
        cfg: the data section of the training config.
        tokenizer: the model's tokenizer identity.
    """

    def __init__(self, cfg: DataConfig, tokenizer: str):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self._warned_null_tokenizer = False

    def decide(self, row: Mapping[str, Any], *, seen: set[str], kept_by_where: bool, place: str) -> SkipReason | None:
        """The decision on `row` (a mapping with :data:`ADMISSION_COLUMNS` and ``refusal``: None, or
        the reason and span indices of :func:`trajstore.sampling.trajectory_refusals`): None =
        admitted, else the reason it is skipped. Adds its id to `seen`.

        Raises:
            TrainDataError: tokenizer mismatch, overlong with ``overlong="error"``, text-only data
                without the opt-in; the message starts with `place`.
        """
        tid = row["trajectory_id"]
        if tid in seen:
            return "duplicate"
        seen.add(tid)
        if not kept_by_where:
            return "where"
        if not row["trainable"]:  # never trained: its tokenizer (often unknown: engine ids) is moot
            return "not_trainable"
        self._check_tokenizer(row["tokenizer"], place)
        if row["reward"] is None or math.isnan(row["reward"]):
            return "no_reward"
        if row["num_tokens"] > self.cfg.max_seq_len:
            if self.cfg.overlong == "error":
                raise TrainDataError(
                    f"{place}: field num_tokens: {row['num_tokens']} tokens > --max-seq-len {self.cfg.max_seq_len} "
                    "with --overlong error (use --overlong skip to leave such rows out, or raise --max-seq-len)")
            return "overlong"
        if is_text_only(row):
            if self.cfg.behaviour_logprobs != "initial-policy":
                raise TrainDataError(
                    f"{place}: no rollout log-probs for its actions (logprob_source={row['logprob_source']}, "
                    f"token_source={row['token_source']}). DIS needs the sampler's log-probs; recomputing "
                    "them with current weights would make every ratio 1. To train on text-only data anyway, "
                    "opt in with --behaviour-logprobs initial-policy (computed once with the initial weights, "
                    "recorded in the run config)")
        elif row["num_missing_logprobs"] >= row["num_action_tokens"]:
            return "no_logprobs"
        elif row.get("refusal") is not None:
            return UNREPRODUCIBLE + row["refusal"][0]
        return None

    def _check_tokenizer(self, tok: str | None, place: str) -> None:
        if tok is None:  # only trainable rows get here (ingest stores unnamed engine tokenizers' rows not trainable)
            if not self._warned_null_tokenizer:
                # one text for every row (the CLI prints each distinct warning once)
                warnings.warn(f"trainable trajectories with no tokenizer recorded (null tokenizer column) are trained "
                              f"as token ids of the model's tokenizer {self.tokenizer!r}", stacklevel=4)
                self._warned_null_tokenizer = True
            return
        if tok != self.tokenizer:
            raise TrainDataError(f"{place}: field tokenizer is {tok!r} but the model's tokenizer is "
                                 f"{self.tokenizer!r}; token ids would mean different text (pass --tokenizer "
                                 "only if the two are really the same tokenizer)")


def decide_rows(store: Store, shard: ShardInfo, start: int, *, rule: AdmissionRule, seen: set[str],
                where: WhereFilter | None, rows: Sequence[int] | None = None) -> Iterator[Admission]:
    """The decision on each row of `shard` from row `start` on (or on each of `rows`, ascending:
    the rows a compaction's output still holds for the cursor), lazily in row order (a refusal is
    raised when its row is reached). Reads scalar columns only (:data:`ADMISSION_COLUMNS`, all of
    them with a ``--where``, which sees the whole shard's: a predicate that reads other rows,
    e.g. a scalar subquery, is relative to the shard).

    Args:
        start: first row to decide (the cursor's next row on resume).
        rule: the rule (it holds the once-per-run tokenizer warning).
        seen: ids seen so far; extended as rows are decided.
        where: the ``--where`` filter, or None.

    Raises:
        TrainDataError: as :meth:`AdmissionRule.decide`, or the predicate fails on the shard.
    """
    if where is None:  # the rule's columns only
        table, keep = read_shard(store, shard, columns=ADMISSION_COLUMNS), None
    else:
        table = read_scalar_columns(store, shard)
        keep = where.mask(table, shard=shard.name)
    records = table.select(list(ADMISSION_COLUMNS)).to_pylist()
    # the sampling fields of the spans only (a few leaf columns), judged once per distinct setting
    refusals = trajectory_refusals(read_span_fields(store, shard, SAMPLING_SPAN_FIELDS))
    for i in (range(start, len(records)) if rows is None else (int(r) for r in rows)):
        place = f"trajectory {records[i]['trajectory_id']!r} (shard {shard.name}, row {i})"
        row = {**records[i], "refusal": refusals[i]}
        skip = rule.decide(row, seen=seen, kept_by_where=keep is None or bool(keep[i]), place=place)
        spans = tuple(refusals[i][1]) if skip is not None and skip.startswith(UNREPRODUCIBLE) else ()
        yield Admission(i, records[i]["trajectory_id"], skip, skip is None and is_text_only(records[i]), place, spans)


def unreproducible_error(refused: Sequence[Admission], *, before_training: bool) -> TrainDataError:
    """The one-line refusal of rows whose log-probs the trainer cannot reproduce (``unreproducible``
    skips), grouped by reason: how many, the first few trajectories with their span indices, and
    the engine or request setting to change; ``--unreproducible skip`` trains the rest.

    Args:
        refused: the rows (Admissions with an ``unreproducible_*`` skip), in arrival order.
        before_training: the census found them (nothing was written yet).
    """
    by_reason: dict[str, list[Admission]] = {}
    for a in refused:
        by_reason.setdefault(a.skip[len(UNREPRODUCIBLE):], []).append(a)
    parts = []
    for reason, rows in by_reason.items():
        spans = sum(len(a.refused_spans) for a in rows)
        first = "; ".join(f"trajectory {a.trajectory_id!r} span{'s' if len(a.refused_spans) > 1 else ''} "
                          f"{', '.join(map(str, a.refused_spans))}" for a in rows[:_NAMED])
        more = f"; and {len(rows) - _NAMED} more" if len(rows) > _NAMED else ""
        parts.append(f"{len(rows)} trajector{'y' if len(rows) == 1 else 'ies'} ({spans} action span"
                     f"{'' if spans == 1 else 's'}) with {REFUSALS[reason]} ({first}{more}): {REMEDIES[reason]}")
    written = "nothing was written; " if before_training else ""
    return TrainDataError("log-probs the trainer cannot reproduce (their importance ratios would be wrong): "
                          + " | ".join(parts) + f" ({written}--unreproducible skip trains the rest)")


_NAMED = 3
"""Trajectories named per reason in :func:`unreproducible_error`."""
