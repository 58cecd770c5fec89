"""trainer/data/stream.py: the trainer's data stream: arrival order, exact resume from a cursor,
--where, refusals (tokenizer mismatch, text-only data), overlong policy, token budget, follow (and
what it says while it waits), schema-v1/v2 shards and mixed-version spans read as one, vLLM's
-9999 stand-in masked end to end, linked trajectories (episode trees: a batch keeps a successor with
its part, a child's shared prefix is never trained in it). Packing and batching: test_packing.py,
test_batching.py."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import trajstore as ts
from tests.helpers.stores import write_split_episode_store, write_synthetic_store
from tests.helpers.trajectories import VOCAB, tiny_model_trajectory
from trajstore import (
    StoreWriter,
    TrajectoryBuilder,
    action_from_openai_completion,
    audit,
    open_store,
    write_trajectories,
)
from trajstore.convert import trajectories_to_table
from trajstore.reader import read_trajectories
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.data import (
    DataCursor,
    StreamClosed,
    TrainDataError,
    TrajectoryStream,
)
from trajstore.trainer.loop.train import train


def _stream(root: str | Path, cursor: DataCursor | None = None, tokenizer: str = "tiny-llama", **cfg) -> TrajectoryStream:
    return TrajectoryStream(open_store(str(root)), DataConfig(**cfg), tokenizer=tokenizer, vocab_size=VOCAB,
                            cursor=cursor)


def _drain(s: TrajectoryStream) -> list[list[str]]:
    out = []
    while (b := s.next_batch()) is not None:
        out.append([x.trajectory_id for x in b.samples])
    return out


def test_arrival_order_and_batch_sizes(tmp_path: Path) -> None:
    ids = write_synthetic_store(tmp_path, 22, per_shard=5)
    batches = _drain(_stream(tmp_path, batch_size=8))
    assert [len(b) for b in batches] == [8, 8, 6]
    assert sum(batches, []) == ids


@pytest.mark.parametrize("stop_after", [1, 2, 3])
def test_resume_from_cursor_reads_every_row_exactly_once(tmp_path: Path, stop_after: int) -> None:
    ids = write_synthetic_store(tmp_path, 23, per_shard=4)
    first = _stream(tmp_path, batch_size=5)
    seen = []
    for _ in range(stop_after):
        b = first.next_batch()
        seen += [x.trajectory_id for x in b.samples]
    # a fresh stream from the saved cursor (through its JSON form, as a checkpoint stores it)
    rest = _drain(_stream(tmp_path, DataCursor.from_json(b.cursor.to_json()), batch_size=5))
    assert seen + sum(rest, []) == ids


def test_duplicates_keep_first_copy_also_after_resume(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = [tiny_model_trajectory(rng, trajectory_id=f"a{i}") for i in range(4)]
    write_trajectories(str(tmp_path), a)
    s = _stream(tmp_path, batch_size=4)
    b = s.next_batch()
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="a1"),
                                       tiny_model_trajectory(rng, trajectory_id="b0")])
    resumed = _stream(tmp_path, b.cursor, batch_size=4)
    nb = resumed.next_batch()
    assert [x.trajectory_id for x in nb.samples] == ["b0"] and nb.skipped == {"duplicate": 1}


def test_where_filters_on_scalar_columns(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12, per_shard=6)
    got = sum(_drain(_stream(tmp_path, batch_size=50, where="trajectory_id >= 't00004' AND num_actions = 3")), [])
    assert got == [f"t{i:05d}" for i in range(4, 12)]
    with pytest.raises(TrainDataError, match="not a valid predicate.*no_such_column"):
        _stream(tmp_path, where="no_such_column = 1")


def test_tokenizer_mismatch_is_refused_naming_the_row(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 3, tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    with pytest.raises(TrainDataError, match=r"trajectory 't00000' \(shard .*row 0\): field tokenizer is "
                                             r"'HuggingFaceTB/SmolLM2-135M-Instruct' but the model's tokenizer is 'tiny-llama'"):
        _stream(tmp_path).next_batch()


def test_text_only_data_needs_the_explicit_opt_in(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 3, with_logprobs=False)
    with pytest.raises(TrainDataError, match="no rollout log-probs.*--behaviour-logprobs initial-policy"):
        _stream(tmp_path).next_batch()
    b = _stream(tmp_path, behaviour_logprobs="initial-policy").next_batch()
    assert len(b.samples) == 3 and all(s.needs_behaviour for s in b.samples)
    assert all(np.isnan(s.rollout_logprobs).all() for s in b.samples)  # never a placeholder value


def test_token_id_outside_vocabulary_is_refused(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 2)
    s = TrajectoryStream(open_store(str(tmp_path)), DataConfig(), tokenizer="tiny-llama", vocab_size=4)
    with pytest.raises(TrainDataError, match="field tokens: id .* outside the model's vocabulary of 4"):
        s.next_batch()


def test_overlong_policy_skip_or_error(tmp_path: Path) -> None:
    ids = write_synthetic_store(tmp_path, 10)
    store = open_store(str(tmp_path))
    lengths = {i: n for i, n in zip(*[[r[k] for r in store_rows(store)] for k in ("trajectory_id", "num_tokens")])}
    limit = sorted(lengths.values())[5]
    b = _stream(tmp_path, batch_size=50, max_seq_len=limit).next_batch()
    assert [x.trajectory_id for x in b.samples] == [i for i in ids if lengths[i] <= limit]
    assert b.skipped["overlong"] == sum(v > limit for v in lengths.values()) > 0
    with pytest.raises(TrainDataError, match="tokens > --max-seq-len"):
        _stream(tmp_path, batch_size=50, max_seq_len=limit, overlong="error").next_batch()


def store_rows(store) -> list[dict]:  # noqa: ANN001
    return read_trajectories(store, columns=["num_tokens"]).to_pylist()


def test_token_budget_closes_a_batch_early(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12)
    s = _stream(tmp_path, batch_size=12, max_batch_tokens=200, max_seq_len=200)
    total = 0
    while (b := s.next_batch()) is not None:
        assert b.num_tokens <= 200
        total += len(b.samples)
    assert total == 12


def test_follow_waits_for_new_shards(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 2, prefix="a")
    store = open_store(str(tmp_path))
    listings = [0]

    def listing() -> list:  # noqa: ANN202 - the stream's listings, counted
        listings[0] += 1
        return store.list_shards()

    # the idle timeout only bounds a hang: the new shards come once the stream is following
    s = TrajectoryStream(store, DataConfig(batch_size=4, follow=True, poll_interval_s=0.05, idle_timeout_s=120),
                         tokenizer="tiny-llama", vocab_size=VOCAB, list_shards=listing)

    def later() -> None:
        deadline = time.monotonic() + 120
        while listings[0] < 2:  # a second listing: the stream has read the 2 there are and waits for more
            assert time.monotonic() < deadline, "the stream never listed the store again"
            time.sleep(0.01)
        write_synthetic_store(tmp_path, 2, prefix="b", seed=1)

    th = threading.Thread(target=later)
    th.start()
    b = s.next_batch()
    th.join()
    assert [x.trajectory_id for x in b.samples] == ["a00000", "a00001", "b00000", "b00001"]
    s2 = _stream(tmp_path, b.cursor, batch_size=4, follow=True, poll_interval_s=0.05, idle_timeout_s=0.2)
    t0 = time.monotonic()
    assert s2.next_batch() is None and time.monotonic() - t0 >= 0.2


def test_close_while_a_reader_thread_filters_waits_for_it(tmp_path: Path) -> None:
    # traj demo's trainer failed at the end of a run with DuckDB's ResourceInUseException: the
    # training thread closed the --where connection while the reader thread was filtering a shard
    # (DuckDB 2 refuses to close a busy connection instead of waiting). The first filter's query
    # waits until close() has been called, so close() always lands while it runs.
    import threading
    import time

    import pyarrow as pa

    from trajstore.schema import SCALAR_COLUMNS, TRAJECTORY_SCHEMA

    inside, closing, closed = threading.Event(), threading.Event(), threading.Event()
    busy_at_close: list[bool] = []

    class SlowConnection:
        def __init__(self, conn) -> None:  # noqa: ANN001
            self.conn = conn
            self.running = False

        def execute(self, *args):  # noqa: ANN002, ANN202
            self.running = True
            try:
                if not inside.is_set():
                    inside.set()
                    assert closing.wait(120)
                    # a close() that does not wait for the filter gets this long to close the
                    # connection under it (the outcome of a correct close does not depend on it)
                    time.sleep(0.2)
                return self.conn.execute(*args)
            finally:
                self.running = False

        def close(self) -> None:
            busy_at_close.append(self.running)
            self.conn.close()

        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(self.conn, name)

    s = _stream(tmp_path, where="reward > 0.5")
    s._where._duck = SlowConnection(s._where._duck)
    n = 10
    cols = {c: pa.nulls(n, TRAJECTORY_SCHEMA.field(c).type) for c in SCALAR_COLUMNS}
    cols["reward"] = pa.array([i / n for i in range(n)])
    table = pa.table(cols)
    outcome: dict = {}

    def filtering() -> None:
        try:
            outcome["mask"] = s._where.mask(table, shard="x.parquet")  # close() is called during it
            assert closed.wait(120)
            s._where.mask(table, shard="y.parquet")  # after close(): refused
        except StreamClosed:
            outcome["closed"] = True
        except Exception as e:  # noqa: BLE001
            outcome["error"] = e

    th = threading.Thread(target=filtering)
    th.start()
    assert inside.wait(120)
    closing.set()
    s.close()
    closed.set()
    th.join(timeout=120)
    assert "error" not in outcome, outcome
    assert busy_at_close == [False]  # close() waited for the query
    assert outcome["closed"] and outcome["mask"].tolist() == [False] * 6 + [True] * 4  # the filter it waited for
    s.close()  # idempotent


# reported: ../shared/fixtures/reported/vllm-9999-sentinel (end to end: stored missing, counted, masked)
def test_vllm_9999_sentinel_is_stored_missing_masked_by_the_trainer_and_counted(tmp_path):
    # vllm-9999-sentinel/repro.py end to end: the SDK stores the stand-in as missing (NaN,
    # counted in num_missing_logprobs), the coverage audit counts it, and the trainer's stream
    # leaves that token out of the action mask, so DIS statistics stay finite.
    torch = pytest.importorskip("torch")
    from trajstore.store import open_store
    from trajstore.trainer.sao.losses import dis_policy_loss

    resp = {"id": "chatcmpl-1", "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [10, 11, 12],
                         "message": {"role": "assistant", "content": "yes"},
                         "logprobs": {"content": [{"token": "y", "logprob": -0.1, "top_logprobs": []},
                                                  {"token": "es", "logprob": -9999.0, "top_logprobs": []},
                                                  {"token": "<eos>", "logprob": -0.01, "top_logprobs": []}]}}]}
    b = TrajectoryBuilder(trajectory_id="sentinel-1", prompt_id="p", tokenizer="tiny")
    b.add_prompt([1, 2, 3])
    b.add_action_call(action_from_openai_completion(resp), policy_version=0)
    b.set_reward(1.0)
    t = b.finish()
    assert t.logprob_source == "engine" and math.isnan(t.action_logprobs[4])  # token 11: missing, not -9999
    store = str(tmp_path / "s")
    with StoreWriter(store) as w:
        w.write(t)
    (row,) = read_trajectories(store).to_pylist()
    assert row["num_missing_logprobs"] == 1  # of 3 action tokens
    rel = audit.coverage_report(audit.connect(open_store(store))).tables()["tokens"]
    share = dict(zip(rel.columns, rel.fetchall()[0]))["share_with_logprob"]
    assert share == pytest.approx(2 / 3)  # 2 of the 3 action tokens have an engine log-prob
    stream = TrajectoryStream(open_store(store), DataConfig(), tokenizer="tiny", vocab_size=100)
    (s,) = stream.next_batch().samples
    # tokens [1, 2, 3, 10, 11, 12]: actions 10 and 12 are trained, 11 (no log-prob) is not
    assert s.action_mask.tolist() == [False, False, False, True, False, True]
    old = torch.tensor(s.rollout_logprobs[s.action_mask]).unsqueeze(0)  # [-0.1, -0.01]
    new = torch.tensor([[-0.1, -0.01]])
    _, st = dis_policy_loss(new, old, torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool), 0.2, 0.2)
    assert float(st.ratio_mean) == pytest.approx(1.0) and float(st.kl_k3) == pytest.approx(0.0, abs=1e-6)


def test_stream_reads_v1_v3_and_missing_columns_as_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = open_store(str(tmp_path / "s"))
    old = [tiny_model_trajectory(rng, trajectory_id=f"old{i}", group_id="g-old", reward=1.0) for i in range(3)]
    v3 = [tiny_model_trajectory(rng, trajectory_id="v3", group_id="g-v3", reward=1.0)]
    mid = [tiny_model_trajectory(rng, trajectory_id=f"mid{i}", group_id="g-mid", reward=0.5) for i in range(2)]
    new = [tiny_model_trajectory(rng, trajectory_id=f"new{i}", group_id="g-new", reward=0.0) for i in range(2)]
    store.write_table(trajectories_to_table(old, version=1))                       # a v1 shard
    store.write_table(trajectories_to_table(mid).drop_columns(["group_id", "metadata"]))  # no group_id column
    store.write_table(trajectories_to_table(new))
    store.write_table(trajectories_to_table(v3, version=3))  # a v3 shard: no `abandoned` column
    s = TrajectoryStream(store, DataConfig(batch_size=100), tokenizer="tiny-llama", vocab_size=VOCAB)
    s.precheck()
    batch = s.next_batch()
    assert batch is not None and s.next_batch() is None
    by_id = {x.trajectory_id: x for x in batch.samples}
    assert list(by_id) == [t.trajectory_id for t in old + mid + new + v3]
    assert [by_id[t.trajectory_id].group_id for t in old + mid + new + v3] == \
        ["g-old"] * 3 + [None] * 2 + ["g-new"] * 2 + ["g-v3"]
    assert by_id["v3"].abandoned is None and by_id["new0"].abandoned is None  # not recorded: credited as kept
    for t in old + mid + new + v3:
        sample = by_id[t.trajectory_id]
        act = np.zeros(len(t.tokens), bool)
        for sp in t.spans:
            if sp.kind == "action":
                act[sp.start:sp.end] = True
        assert np.array_equal(sample.tokens, t.tokens) and np.array_equal(sample.action_mask, act)
        # The full-length view the trainer packs: the engine's values at action tokens, NaN elsewhere.
        assert np.array_equal(sample.rollout_logprobs.view(np.uint32), t.action_logprobs.view(np.uint32))
        assert not sample.needs_behaviour
        # no lineage before schema v3: each its own episode, no parent (trained alone, as before)
        assert (sample.episode_id, sample.parent_trajectory_id, sample.link_kind, sample.fork_point) == (
            t.trajectory_id, None, None, None)


def test_a_batch_keeps_a_context_rewrite_successor_with_its_part(tmp_path: Path) -> None:
    # episode trees: the GAE chain across a rewrite needs both parts in one batch. Rows in arrival order:
    # ep0.0, ep0.1 (its context_rewrite successor), ep0.2 (a sub-agent), then ep1.*
    write_split_episode_store(tmp_path, 2)
    assert _drain(_stream(tmp_path, batch_size=2)) == [["ep0.0", "ep0.1"], ["ep0.2", "ep1.0", "ep1.1"], ["ep1.2"]]
    assert _drain(_stream(tmp_path, batch_size=1)) == [["ep0.0", "ep0.1"], ["ep0.2"], ["ep1.0", "ep1.1"],
                                                       ["ep1.2"]]
    s = _stream(tmp_path, batch_size=3)
    first = s.next_batch()
    assert first is not None and first.cursor.next_row == 3  # the row read ahead is the next batch's
    rewrite = first.samples[1]
    assert (rewrite.episode_id, rewrite.parent_trajectory_id, rewrite.link_kind, rewrite.fork_point) == (
        "ep0", "ep0.0", "context_rewrite", 4)
    assert [x.trajectory_id for x in s.next_batch().samples] == ["ep1.0", "ep1.1", "ep1.2"]


def test_a_childs_shared_prefix_is_never_an_action_slot_of_the_child(tmp_path: Path) -> None:
    # a child stored with its parent's actions as its own actions (not what the proxy writes: it
    # stores the shared prefix as the child's prompt) must not train them a second time
    rng = np.random.default_rng(5)
    parent = tiny_model_trajectory(rng, trajectory_id="p", num_turns=2, reward=1.0)
    b = TrajectoryBuilder(trajectory_id="c", model="tiny", tokenizer="tiny-llama")
    for sp in parent.spans:
        ids = parent.tokens[sp.start:sp.end]
        if sp.kind == "action":
            b.add_action(ids, parent.action_logprobs[sp.start:sp.end], policy_version=0)
        elif sp.kind == "prompt":
            b.add_prompt(ids)
        else:
            b.add_observation(ids)
    b.add_observation([5, 6])
    b.add_action([7, 8, 9], [-1.0, -1.0, -1.0], policy_version=0)
    b.set_reward(1.0)
    n = len(parent.tokens)
    child = b.finish().model_copy(update={"parent_trajectory_id": "p", "fork_point": n, "link_kind": "fork"})
    write_trajectories(str(tmp_path), [parent, child])
    batch = _stream(tmp_path, batch_size=2).next_batch()
    p, c = batch.samples
    assert p.num_action_tokens == sum(sp.end - sp.start for sp in parent.spans if sp.kind == "action")
    assert not c.action_mask[:n].any() and c.action_mask[n + 2:].tolist() == [True] * 3
    assert batch.skipped == {"shared_prefix_actions": 1}


def _cfg(store: Path, **data) -> TrainConfig:
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512, **data),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id="r", progress=False, checkpoint_every=100))


# what `traj train` tells its user while it runs and how it stops
def test_follow_says_what_it_waits_for_and_how_much_it_has_seen(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write_synthetic_store(tmp_path, 3)
    cfg = _cfg(tmp_path, follow=True, idle_timeout_s=1.0, poll_interval_s=0.2)
    s = train(cfg)
    assert s.iterations == 2  # a full batch of 2, then the last one alone after the idle timeout
    err = capsys.readouterr().err
    assert f"waiting for new trajectories in {tmp_path}/trajectories: 3 seen so far, 1/2 for the next step " \
           "(polling every 0.2s; stopping after 1s without data)" in err, err


def test_mixed_span_trains_at_its_oldest_version_and_is_counted(tmp_path):
    b = ts.TrajectoryBuilder(trajectory_id="m", tokenizer="tiny-llama")
    b.add_prompt([1, 2])
    b.add_action([3, 4], [-0.1, -0.2], policy_version=2)
    b.add_observation([5])
    b.add_action([6, 7, 8], [-0.3, -0.4, -0.5], policy_version=3, policy_version_max=4)
    b.set_reward(1.0)
    ts.write_trajectories(str(tmp_path), [b.finish()])
    stream = TrajectoryStream(open_store(str(tmp_path)), DataConfig(batch_size=1, micro_batch_size=1),
                              tokenizer="tiny-llama", vocab_size=16)
    (s,) = stream.next_batch().samples
    # tokens: prompt 1 2 | action 3 4 (v2) | observation 5 | action 6 7 8 (v3..v4, counted at v3)
    np.testing.assert_array_equal(s.policy_version, [-1, -1, 2, 2, -1, 3, 3, 3])
    assert s.mixed_version_actions == 1
    assert (s.min_policy_version, s.max_policy_version) == (2, 3)


def test_an_unreadable_shard_refuses_the_run_unless_skip_unreadable(tmp_path: Path) -> None:
    """As the audits and export: a truncated shard's rows silently left out of a run is refused,
    naming the shard, before anything is written; --skip-unreadable trains on the rest."""
    write_synthetic_store(tmp_path, 8, per_shard=4)
    shard = sorted((tmp_path / "trajectories").glob("*.parquet"))[-1]
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(TrainDataError, match=f"{shard.name}.*nothing was written.*--skip-unreadable"):
        _stream(tmp_path, batch_size=4).precheck()
    with pytest.warns(UserWarning, match="skipping corrupt shard"):
        census = _stream(tmp_path, batch_size=4, skip_unreadable=True).precheck()
    assert census.rows == 4
