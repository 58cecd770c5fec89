"""slime: one row per ``slime.utils.types.Sample``, as ``Sample.to_dict()`` gives it, in Parquet
(``Sample.from_dict(row)`` builds the Sample back; slime's own debug dump is the same dicts
pickled with ``torch.save``, which this export does not write).

Layout checked against github THUDM/slime commit 624b824: ``slime/utils/types.py`` (``Sample``,
``append_response_tokens``: tool tokens get loss-mask 0 and log-prob 0.0; ``_apply_meta_info``:
one ``weight_version`` appended per engine call) and ``slime/observability/rollout_data_utils.py``.
"""

from __future__ import annotations

import json
from typing import Final

import pyarrow as pa

from trajstore.export.samples import CARRIED_LINEAGE, Sample, held_window_columns, response_window_lists
from trajstore.export.target import MIXED_AS_OLDEST, TAIL_DROPPED, Part, trainer_target, write_table_part
from trajstore.view.decode import Decoder

FIELDS: Final[dict[str, str]] = {"logprobs": "rollout_log_probs", "rewards": "reward", "versions": "weight_versions"}
"""slime's name of each field it holds (its optional columns, in this order)."""


def slime_samples(samples: list[Sample], *, holds: frozenset[str], offset: int = 0,
                  groups: dict[str, int] | None = None, decoder: Decoder | None = None) -> pa.Table:
    """The Sample dicts of `samples`, one row each (R = that sample's response length).

    Columns: ``index`` (position in the whole export), ``group_index`` (the export-wide number of
    the sample's stored ``group_id``, in order of first appearance, shared through `groups`; a
    trajectory without a group is a group of its own; the stored group and prompt ids are in
    ``metadata``), ``prompt`` and ``response`` (the text of ``tokens[:P]`` and of the response,
    decoded with the trajectory's tokenizer, special tokens kept, as a reward function reads
    ``sample.response``; "" when the tokenizer cannot be loaded, and ``metadata.text`` says why),
    ``tokens`` (list<int32>: prompt then response), ``response_length`` (R), ``loss_mask`` (list<int32>, R
    long, 1 = action token, 0 = observation), ``status`` (completed | truncated | aborted | failed,
    slime's ``Sample.Status`` values), ``metadata`` (JSON object: trajectory_id, source, model,
    group_id, prompt_id, lineage), with ``logprobs`` held ``rollout_log_probs`` (list<float32>, R
    long, 0.0 where loss_mask is 0), with ``rewards`` held ``reward`` (float64), with
    ``versions`` held ``weight_versions`` (list<string>, one per model call in order, the call's
    policy version; a call of several versions gives its oldest).
    """
    groups = {} if groups is None else groups
    decoder = decoder or Decoder()
    texts = [_texts(decoder, s) for s in samples]
    window = response_window_lists(samples)
    cols: dict[str, pa.Array] = {
        "index": pa.array(range(offset, offset + len(samples)), pa.int64()),
        "group_index": pa.array([groups.setdefault(s.group_id if s.group_id is not None else f"\0{s.trajectory_id}",
                                                   len(groups)) for s in samples], pa.int64()),
        "prompt": pa.array([p for p, _, _ in texts], pa.string()),
        "response": pa.array([r for _, r, _ in texts], pa.string()),
        "tokens": pa.array([s.tokens for s in samples], pa.list_(pa.int32())),
        "response_length": pa.array([s.response_len for s in samples], pa.int64()),
        "loss_mask": window["mask"],
        "status": pa.array([s.status for s in samples], pa.string()),
        "metadata": pa.array([json.dumps({**_metadata(s), **({"text": why} if why else {})}, sort_keys=True)
                              for s, (_, _, why) in zip(samples, texts)], pa.string()),
    }
    cols.update(held_window_columns(samples, window, holds=holds, names=FIELDS))
    if "versions" in holds:
        cols[FIELDS["versions"]] = pa.array([[str(c.policy_version) for c in s.calls] for s in samples],
                                           pa.list_(pa.string()))
    return pa.table(cols)


def _texts(decoder: Decoder, s: Sample) -> tuple[str, str, str | None]:
    """(prompt text, response text, None) of `s`, or ("", "", why) without a loadable tokenizer."""
    tok, why = decoder.tokenizer(s.tokenizer)
    if tok is None:
        return "", "", f"prompt and response not decoded: {why.split(':')[0] if why else 'no tokenizer'}"
    return Decoder.text(tok, s.tokens[:s.prompt_len]), Decoder.text(tok, s.tokens[s.prompt_len:]), None


def _metadata(s: Sample) -> dict:
    return {"trajectory_id": s.trajectory_id, "source": s.source, "model": s.model, "group_id": s.group_id,
            "prompt_id": s.prompt_id, **{c: s.lineage.get(c) for c in CARRIED_LINEAGE}}


def write_part(part: Part) -> list[str]:
    return write_table_part(part, slime_samples(part.samples, holds=part.holds, offset=part.offset,
                                                groups=part.groups))


LOADER = """\
import json, pyarrow.parquet as pq
from slime.utils.types import Sample
rows = pq.read_table("DIR/part-00000.parquet").to_pylist()
samples = [Sample.from_dict({**r, "metadata": json.loads(r["metadata"])}) for r in rows]"""

TARGET = trainer_target(
    name="slime", description="slime Sample dicts (Parquet, one row per Sample)",
    fields=FIELDS,
    alignment="response window: tokens = prompt + response, loss_mask and rollout_log_probs response_length long "
              "(0 / 0.0 on observation tokens); one weight_version per model call",
    checked_against="slime github THUDM/slime@624b824: slime/utils/types.py, slime/observability/rollout_data_utils.py",
    write=write_part, loader=LOADER, approximates=frozenset({TAIL_DROPPED, MIXED_AS_OLDEST}))
