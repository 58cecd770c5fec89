"""RL-framework rollout dumps -> text rollouts.

verl (``trainer.rollout_data_dir`` / ``validation_data_dir``) writes one JSONL file per training
step, ``<step>.jsonl``, one line per sample: ``input`` (the prompt as the chat template rendered
it), ``output`` (the completion text), ``score`` (the reward), ``step`` and, when configured,
``gts`` and the reward function's extra fields. SkyRL's dumps name the same fields
``input_prompt`` / ``output_response``. Both are text only: the prompt and the completion are
tokenized as they are (no chat template is applied again), so ids match what the model saw only
when the dump kept the template's special tokens (verl decodes with ``skip_special_tokens``
unless configured otherwise); ``metadata.special_tokens_in_text`` says whether it did.

Samples of one step with the same prompt are one group (GRPO's n samples): they share a
``prompt_id``; the line number keeps identical samples apart.
"""

from __future__ import annotations

import hashlib
from typing import Any

from trajstore.ingest.formats.rewards import float_reward
from trajstore.ingest.formats.spec import InputFormat, Records
from trajstore.ingest.records import Origin, RecordError, TextRollout, TextSegment
from trajstore.ingest.values import json_type

SOURCE = "verl"
INPUT_KEYS = ("input", "input_prompt")
OUTPUT_KEYS = ("output", "output_response")
EXTRA_META_KEYS = ("gts", "data_source", "stop_reason", "env_class", "acc", "pred")
"""Per-sample fields copied into metadata when present (scalars and short strings)."""


def _field(row: dict[str, Any], keys: tuple[str, ...], what: str) -> str:
    for k in keys:
        if k in row:
            v = row[k]
            if not isinstance(v, str):
                raise RecordError(f"{k} is {json_type(v)}, expected the {what} text (a string)")
            return v
    raise RecordError(f"rollout dump row has no {what} ({' or '.join(keys)})")


def parse_row(row: Any, origin: Origin) -> TextRollout:
    """One line of a verl / SkyRL rollout dump; reward = ``score``.

    Raises:
        RecordError: no input or output text, or an empty output (nothing the model generated).
    """
    if not isinstance(row, dict):
        raise RecordError("rollout dump row is not an object")
    prompt = _field(row, INPUT_KEYS, "input")
    output = _field(row, OUTPUT_KEYS, "output")
    if not output:
        raise RecordError("output is empty: the sample holds no generated text")
    step = row.get("step", row.get("global_step"))
    group = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    key = (f"step{step}-" if step is not None else "") + f"line{origin.line}"
    meta = {k: row[k] for k in EXTRA_META_KEYS if isinstance(row.get(k), (str, int, float, bool))
            and not (isinstance(row[k], str) and len(row[k]) > 2000)}
    meta["step"] = step
    score_key = "score" if "score" in row or "reward" not in row else "reward"
    return TextRollout(source=SOURCE, key=key, origin=origin, reward=float_reward(row.get(score_key), score_key),
                       prompt_id=f"prompt-{group}", metadata=meta,
                       segments=[TextSegment("prompt", prompt, role="user"), TextSegment("action", output,
                                                                                          role="assistant")])


def _is_row(d: dict[str, Any]) -> bool:
    """An input and an output text field, and a ``score`` or ``step``."""
    return any(k in d for k in INPUT_KEYS) and any(k in d for k in OUTPUT_KEYS) and ("score" in d or "step" in d)


VERL_ROLLOUTS = InputFormat("verl-rollouts", "verl / SkyRL rollout dumps (input, output, score, step per line)",
                            SOURCE, records=Records(parse_row, keys=INPUT_KEYS, signature=_is_row))
