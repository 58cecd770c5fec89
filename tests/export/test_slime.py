"""trajstore/export/slime.py: the Sample dicts of the three-turn store, written by hand from the
table in tests/helpers/export.py. slime is not on the package registry (its Sample.from_dict cannot
be called here); the row keys are checked against the Sample fields read from its source."""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.export import UNCHECKED
from trajstore.export import ExportOptions, export_store

F = np.float32

SLIME_SAMPLE_FIELDS = {"group_index", "index", "prompt", "response", "tokens", "response_length", "loss_mask", "rollout_log_probs",
                       "reward", "weight_versions", "status", "metadata"}
"""Fields of slime.utils.types.Sample (THUDM/slime@624b824) the export fills; from_dict takes them by name."""


def test_slime_sample_rows(store, tmp_path, read_out):
    out = tmp_path / "slime"
    export_store(store, "slime", str(out), UNCHECKED)
    rows = read_out(out, "part-00000.parquet")
    assert set(rows) == SLIME_SAMPLE_FIELDS
    assert rows["index"] == [0, 1] and rows["group_index"] == [0, 0]  # both of group g1
    assert rows["prompt"] == rows["response"] == ["", ""]  # the tokenizer "tok" cannot be loaded: said in metadata
    assert rows["tokens"] == [[11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61], [14, 23]]  # prompt + response
    assert rows["response_length"] == [9, 1]
    assert rows["loss_mask"] == [[1, 1, 0, 1, 1, 1, 0, 0, 1], [1]]
    assert rows["rollout_log_probs"] == [[F(-0.1), F(-0.2), 0.0, F(-0.3), F(-0.4), F(-0.5), 0.0, 0.0, F(-0.6)],
                                         [F(-0.7)]]
    assert rows["reward"] == [1.0, 0.5]
    assert rows["weight_versions"] == [["3", "4", "4"], ["5"]]  # one per engine call
    assert rows["status"] == ["completed", "truncated"]
    assert json.loads(rows["metadata"][0]) == {"trajectory_id": "t1", "source": "sdk", "model": "m",
                                               "group_id": "g1", "prompt_id": "p1", "episode_id": "t1",
                                               "parent_trajectory_id": None, "fork_point": None, "link_kind": None,
                                               "abandoned": None,
                                               "text": "prompt and response not decoded: tokenizer 'tok' cannot be "
                                                       "loaded (model/tokenizer 'tok' is neither 'smollm2-135m', a "
                                                       ".gguf file, nor a local Hugging Face directory (nothing is "
                                                       "downloaded at run time))"}


def test_slime_offsets_index_across_files(store, tmp_path, read_out):
    out = tmp_path / "slime"
    r = export_store(store, "slime", str(out), ExportOptions(allow_secrets=True, rows_per_file=1))
    assert r.files == ["part-00000.parquet", "part-00001.parquet"]
    assert read_out(out, "part-00001.parquet")["index"] == [1]


def test_slime_rows_carry_the_decoded_text_and_the_group_index(tmp_path, read_out, smol_tokenizer):
    # before: prompt and response were '' (a reward function reading sample.response got nothing)
    # and group_index was null
    from tests.helpers.export import write_store
    from tests.helpers.secrets import clean_trajectory

    tok = smol_tokenizer
    c1, c2, c3 = (clean_trajectory(tok, f"c{i}") for i in (1, 2, 3))
    c1, c2 = (t.model_copy(update={"group_id": "g"}) for t in (c1, c2))
    store = write_store(tmp_path / "s", [c1, c3, c2])
    export_store(store, "slime", str(tmp_path / "out"), ExportOptions(allow_secrets=True, rows_per_file=2))
    a, b = read_out(tmp_path / "out", "part-00000.parquet"), read_out(tmp_path / "out", "part-00001.parquet")
    assert a["group_index"] + b["group_index"] == [0, 1, 0]  # numbered across the files of one export
    first = [s for s in c1.spans if s.kind == "action"][0].start
    last = max(s.end for s in c1.spans if s.kind == "action")
    ids = np.asarray(c1.tokens)
    assert a["prompt"][0] == tok.decode(ids[:first].tolist(), skip_special_tokens=False)
    assert a["response"][0] == tok.decode(ids[first:last].tolist(), skip_special_tokens=False)
    assert "<|im_start|>user" in a["prompt"][0] and a["response"][0] and "text" not in json.loads(a["metadata"][0])
