"""trainer/data/vocabulary.py: the vocabulary check reads the shards' statistics, and tokens only
without them."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.stores import write_synthetic_store
from trajstore.trainer.config import DataConfig


# issue 14: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_vocabulary_check_reads_statistics_only_and_reads_tokens_without_them(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from trajstore import open_store
    from trajstore.trainer import data
    from trajstore.trainer.data import vocabulary

    write_synthetic_store(tmp_path, 4, per_shard=2)
    reads: list[str] = []
    original = vocabulary._read_column
    monkeypatch.setattr(vocabulary, "_read_column", lambda s, sh, c: reads.append(sh.name) or original(s, sh, c))
    stream = data.TrajectoryStream(open_store(str(tmp_path)), DataConfig(max_seq_len=512), tokenizer="tiny-llama",
                                   vocab_size=None)
    census = stream.precheck()
    stream.vocab_size = 128
    stream.check_vocabulary(census)
    assert reads == [] and census.max_token_id is not None and census.max_token_id < 128
    # a shard written without statistics (another writer): its token column is read instead
    first = sorted((tmp_path / "trajectories").glob("*.parquet"))[0]
    t = pq.read_table(first)
    pq.write_table(t, first, write_statistics=False)
    stream = data.TrajectoryStream(open_store(str(tmp_path)), DataConfig(max_seq_len=512), tokenizer="tiny-llama",
                                   vocab_size=100)
    with pytest.raises(data.TrainDataError, match="is outside the model's vocabulary of 100"):
        stream.check_vocabulary(stream.precheck())
    assert reads == [first.name]
