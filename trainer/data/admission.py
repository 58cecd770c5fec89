"""The one rule that admits a stored trajectory to training. The pre-flight census and the stream
both get their decisions from :func:`decide_rows`: same columns read, same ``--where`` scope,
same order of checks, so what the census counts is what the stream trains."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

from trajstore.reader import read_shard
from trajstore.store import ShardInfo, Store
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data.columns import read_scalar_columns
from trajstore.trainer.data.errors import TrainDataError
from trajstore.trainer.data.where import WhereFilter

ADMISSION_COLUMNS: Final[tuple[str, ...]] = (
    "trajectory_id", "trainable", "tokenizer", "reward", "num_tokens", "logprob_source", "token_source",
    "num_action_tokens", "num_missing_logprobs")
"""The scalar columns the rule reads."""

SkipReason = Literal["duplicate", "where", "not_trainable", "no_reward", "overlong", "no_logprobs"]

SKIP_REASONS: Final[dict[str, str]] = {
    "duplicate": "duplicate ids",
    "where": "filtered by --where",
    "not_trainable": "marked not trainable",
    "no_reward": "without a reward",
    "overlong": "longer than --max-seq-len",
    "no_logprobs": "without an engine log-prob on any action token",
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
    """

    row: int
    trajectory_id: str
    skip: SkipReason | None
    text_only: bool
    place: str


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

    Args:
        cfg: the data section of the training config.
        tokenizer: the model's tokenizer identity.
    """

    def __init__(self, cfg: DataConfig, tokenizer: str):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self._warned_null_tokenizer = False

    def decide(self, row: Mapping[str, Any], *, seen: set[str], kept_by_where: bool, place: str) -> SkipReason | None:
        """The decision on `row` (a mapping with :data:`ADMISSION_COLUMNS`): None = admitted, else
        the reason it is skipped. Adds its id to `seen`.

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
    for i in (range(start, len(records)) if rows is None else (int(r) for r in rows)):
        place = f"trajectory {records[i]['trajectory_id']!r} (shard {shard.name}, row {i})"
        skip = rule.decide(records[i], seen=seen, kept_by_where=keep is None or bool(keep[i]), place=place)
        yield Admission(i, records[i]["trajectory_id"], skip, skip is None and is_text_only(records[i]), place)
