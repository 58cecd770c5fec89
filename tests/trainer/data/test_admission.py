"""One admission rule: the pre-flight census (``TrajectoryStream.precheck``, which
must refuse or count before a run writes anything) and the stream that feeds the steps decide
every row alike, for each reason a row is skipped or refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.trajectories import VOCAB, tiny_model_trajectory
from trajstore import open_store, read_trajectories, write_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.models import SamplingParams
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data import TrainDataError, TrajectoryStream, read_scalar_columns


def _stream(root: Path, **cfg) -> TrajectoryStream:
    return TrajectoryStream(open_store(str(root)), DataConfig(**{"batch_size": 100, **cfg}), tokenizer="tiny-llama",
                            vocab_size=VOCAB)


def _census_ids(s: TrajectoryStream) -> tuple[list[str], dict[str, int]]:
    """Ids the census counts as trainable (from its candidate rows) and its skips."""
    census = s.precheck()
    ids = []
    for shard, rows in census.candidates:
        col = read_scalar_columns(s.store, shard).column("trajectory_id").to_pylist()
        ids += [col[r] for r in rows]
    assert census.trainable == len(ids)
    return ids, census.skipped


def _trained(s: TrajectoryStream) -> tuple[list[str], dict[str, int]]:
    """Ids of the samples the stream yields that have an action token to train on, and its skips."""
    ids: list[str] = []
    skipped: dict[str, int] = {}
    while (b := s.next_batch()) is not None:
        ids += [x.trajectory_id for x in b.samples if x.num_action_tokens > 0]
        for k, v in b.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    return ids, skipped


def _without_logprobs(t, which: slice):  # noqa: ANN001, ANN202
    """`t` with the engine log-probs of the action tokens `which` (in action order) unknown (NaN),
    as a writer other than the SDK may store them: the SDK refuses an engine trajectory with no
    action log-prob at all, the reader and trainer do not."""
    lp = t.action_logprobs.copy()
    act = np.flatnonzero(~np.isnan(lp))
    lp[act[which]] = np.nan
    return t.model_copy(update={"action_logprobs": lp})


def test_census_and_stream_admit_the_same_rows_for_every_reason(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    mk = lambda tid, **kw: tiny_model_trajectory(rng, trajectory_id=tid, reward=1.0, **kw)  # noqa: E731
    long = mk("long", num_turns=6, action_len=(20, 21))  # 6 x 20 action tokens: > 100 tokens
    rows = [
        mk("ok"),
        mk("not-trainable").model_copy(update={"not_trainable_reason": "unnamed engine tokenizer"}),
        mk("no-reward").model_copy(update={"reward": None}),
        long,
        mk("filtered"),
        _without_logprobs(mk("some-logprobs"), slice(0, 2)),  # two action tokens leave the mask, the rest train
        _without_logprobs(mk("no-logprobs"), slice(None)),  # nothing left to train on
    ]
    store = open_store(str(tmp_path))
    store.write_table(trajectories_to_table(rows))
    write_trajectories(str(tmp_path), [mk("ok")])  # a later copy of an id: the first one wins
    assert len(long.tokens) > 100 > max(len(t.tokens) for t in rows if t is not long)
    cfg = {"max_seq_len": 100, "where": "trajectory_id <> 'filtered'"}

    census_ids, census_skipped = _census_ids(_stream(tmp_path, **cfg))
    trained_ids, stream_skipped = _trained(_stream(tmp_path, **cfg))
    # the two decide alike, row by row and reason by reason ...
    assert census_ids == trained_ids
    assert census_skipped == stream_skipped
    # ... and as the rule says (stream.py's docstring)
    assert trained_ids == ["ok", "some-logprobs"]
    assert stream_skipped == {"duplicate": 1, "where": 1, "not_trainable": 1, "no_reward": 1, "overlong": 1,
                              "no_logprobs": 1}


def test_a_store_of_rows_without_any_engine_logprob_has_nothing_to_train(tmp_path: Path) -> None:
    """The census is what stops a run before it writes anything ('nothing to train'): it must not
    count a row of which the stream trains no token."""
    rng = np.random.default_rng(8)
    rows = [_without_logprobs(tiny_model_trajectory(rng, trajectory_id=f"t{i}", reward=1.0), slice(None))
            for i in range(3)]
    open_store(str(tmp_path)).write_table(trajectories_to_table(rows))
    census = _stream(tmp_path).precheck()
    assert census.trainable == 0 and census.skipped == {"no_logprobs": 3}
    assert census.describe() == "3 rows: 0 trainable (3 without an engine log-prob on any action token)"
    assert _stream(tmp_path).next_batch() is None


def test_where_sees_the_same_rows_in_census_and_stream(tmp_path: Path) -> None:
    """A predicate is evaluated on one shard's scalar columns by both (the stream evaluated it on
    each row group, the census on the shard: a predicate that reads other rows, e.g. a scalar
    subquery, which the check accepts, selected different rows)."""
    rng = np.random.default_rng(9)
    rows = [tiny_model_trajectory(rng, trajectory_id=f"t{i}", reward=float(i)) for i in range(6)]
    store = open_store(str(tmp_path))
    store.write_table(trajectories_to_table(rows), row_group_target_mb=1e-4)  # one row group per row
    assert store.list_shards("trajectories")[0].num_row_groups > 1
    cfg = {"where": "reward >= (SELECT max(reward) FROM trajectories)"}
    census_ids, _ = _census_ids(_stream(tmp_path, **cfg))
    trained_ids, _ = _trained(_stream(tmp_path, **cfg))
    assert census_ids == trained_ids == ["t5"]


@pytest.mark.parametrize("opt_in", [False, True])
def test_text_only_rows_are_refused_or_admitted_alike(tmp_path: Path, opt_in: bool) -> None:
    rng = np.random.default_rng(10)
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="text", with_logprobs=False,
                                                             reward=1.0)])
    cfg = {"behaviour_logprobs": "initial-policy"} if opt_in else {}
    if not opt_in:
        for run in (lambda s: s.precheck(), lambda s: s.next_batch()):
            with pytest.raises(TrainDataError, match=r"trajectory 'text' \(shard .*row 0\): no rollout log-probs"):
                run(_stream(tmp_path, **cfg))
        return
    census_ids, _ = _census_ids(_stream(tmp_path, **cfg))
    b = _stream(tmp_path, **cfg).next_batch()
    assert census_ids == [s.trajectory_id for s in b.samples] == ["text"] and b.samples[0].needs_behaviour
    assert read_trajectories(str(tmp_path), columns=["num_missing_logprobs"]).column(
        "num_missing_logprobs").to_pylist() == [b.samples[0].num_action_tokens]  # every action token trains


def _null_tokenizer_store(root: Path, *, trainable_too: bool) -> None:
    rng = np.random.default_rng(0)
    engine = [tiny_model_trajectory(rng, trajectory_id=f"ng{i}").model_copy(update={
        "tokenizer": None, "not_trainable_reason": "engine token ids of an unnamed tokenizer"}) for i in range(3)]
    ok = [tiny_model_trajectory(rng, trajectory_id=f"ok{i}", tokenizer="tiny-llama") for i in range(2)]
    extra = [tiny_model_trajectory(rng, trajectory_id=f"sdk{i}").model_copy(update={"tokenizer": None})
             for i in range(2)] if trainable_too else []
    write_trajectories(str(root), engine + ok + extra)


def _vocab() -> int:
    return VOCAB


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("trainable_too", [False, True])
def test_null_tokenizer_warning_is_about_trainable_rows_only_and_once(tmp_path: Path, trainable_too: bool) -> None:
    import warnings

    pytest.importorskip("torch")

    _null_tokenizer_store(tmp_path, trainable_too=trainable_too)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = TrajectoryStream(open_store(str(tmp_path)), DataConfig(batch_size=2), tokenizer="tiny-llama",
                             vocab_size=_vocab())
        trained = []
        while (b := s.next_batch()) is not None:
            trained += [x.trajectory_id for x in b.samples]
    texts = [str(w.message) for w in seen if "tokenizer" in str(w.message)]
    assert not any(t.startswith("ng") for t in trained)  # engine rows of an unnamed tokenizer: never trained
    if not trainable_too:  # the NeMo Gym case: nothing is 'assumed' about rows that are not trained
        assert texts == []
    else:
        assert texts == ["trainable trajectories with no tokenizer recorded (null tokenizer column) are trained as "
                         "token ids of the model's tokenizer 'tiny-llama'"]
        assert {"sdk0", "sdk1"} <= set(trained)


def _sampled(t, **span):  # noqa: ANN001, ANN003, ANN202
    """`t` with every action span's sampling fields / logprob_mode set to `span`."""
    return t.model_copy(update={"spans": [s.model_copy(update=span) if s.kind == "action" else s for s in t.spans]})


def _unreproducible_rows(rng: np.random.Generator) -> list:
    mk = lambda tid: tiny_model_trajectory(rng, trajectory_id=tid, reward=1.0)  # noqa: E731
    qwen = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    return [
        mk("ok"),
        _sampled(mk("processed"), **qwen, logprob_mode="processed"),
        _sampled(mk("raw-t1"), temperature=1.0, logprob_mode="raw"),  # raw == processed here
        *(_sampled(mk(f"raw-{i}"), **qwen, logprob_mode="raw") for i in range(4)),
        _sampled(mk("penalty"), sampling_params=SamplingParams(temperature=1.0, extra={"presence_penalty": 0.5})
                 .to_json()),
    ]


def test_unreproducible_log_probs_are_refused_in_one_line_naming_spans_and_the_setting(tmp_path: Path) -> None:
    open_store(str(tmp_path)).write_table(trajectories_to_table(_unreproducible_rows(np.random.default_rng(11))))
    with pytest.raises(TrainDataError) as e:
        _stream(tmp_path).precheck()
    msg = str(e.value)
    assert "\n" not in msg
    # spans 1, 3, 5 are the three actions of each (prompt, action, observation, ...) trajectory
    assert ("4 trajectories (12 action spans) with raw log-probs" in msg
            and "trajectory 'raw-0' spans 1, 3, 5; trajectory 'raw-1' spans 1, 3, 5; trajectory 'raw-2' spans "
                "1, 3, 5; and 1 more" in msg and "start vLLM with --logprobs-mode processed_logprobs" in msg)
    assert "1 trajectory (3 action spans) with presence / frequency / repetition penalties" in msg
    assert "nothing was written" in msg and "--unreproducible skip trains the rest" in msg
    assert "raw-t1" not in msg and "'processed'" not in msg
    # the stream (rows arriving after the census, with --follow) refuses the first it meets
    with pytest.raises(TrainDataError, match=r"1 trajectory \(3 action spans\) with raw log-probs .*'raw-0'"):
        _stream(tmp_path).next_batch()


def test_unreproducible_log_probs_are_skipped_and_counted_alike_with_skip(tmp_path: Path) -> None:
    open_store(str(tmp_path)).write_table(trajectories_to_table(_unreproducible_rows(np.random.default_rng(12))))
    census_ids, census_skipped = _census_ids(_stream(tmp_path, unreproducible="skip"))
    trained_ids, stream_skipped = _trained(_stream(tmp_path, unreproducible="skip"))
    assert census_ids == trained_ids == ["ok", "processed", "raw-t1"]
    assert census_skipped == stream_skipped == {"unreproducible_raw_logprobs": 4, "unreproducible_penalty": 1}
    census = _stream(tmp_path, unreproducible="skip").precheck()
    assert "4 with log-probs the trainer cannot reproduce (raw log-probs" in census.describe()


def test_rows_of_a_v3_shard_train_as_before_unless_the_request_changed_the_distribution(tmp_path: Path) -> None:
    """v3 shards record no logprob_mode: their log-probs are trained as processed (a temperature
    alone trains as it did), while a recorded penalty is refused whatever the version."""
    rows = _unreproducible_rows(np.random.default_rng(13))
    open_store(str(tmp_path)).write_table(trajectories_to_table(rows, version=3))
    census_ids, skipped = _census_ids(_stream(tmp_path, unreproducible="skip"))
    assert census_ids == [t.trajectory_id for t in rows[:-1]] and skipped == {"unreproducible_penalty": 1}
