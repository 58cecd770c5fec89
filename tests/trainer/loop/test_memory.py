"""trainer/loop/memory.py: memory of `traj train` on long trajectories (issue 14, a new user's report):
one policy step of SmolLM2-135M on the ingested harness logs (trajectories up to the default --max-
seq-len 8192, micro-batches of 2) printed nothing for 15 minutes and was OOM-killed at 24 GB. Now
micro-batches are bounded by tokens, activation checkpointing switches on when a long trajectory
needs it, a run that cannot fit is refused before anything is written, and every pass of a step says
what it does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore.cli.main import app
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop import memory as M
from trajstore.trainer.loop.records import RunRecorder
from trajstore.trainer.loop.train import train

GIB = 1 << 30


def _smollm2_135m() -> M.ModelShape:
    """SmolLM2-135M's shape from its configuration (meta device: no weights, no download)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    c = LlamaConfig(vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(c)
    return M.model_shape(model, ModelConfig(name="x").critic_trainable_pattern, with_critic=True)


SMOLLM2_135M = _smollm2_135m()


def test_the_reported_run_cannot_fit_24_gb_without_a_token_bound_or_checkpointing() -> None:
    # the user's first micro-batch: two trajectories of 5,534 + 5,966 tokens, no checkpointing
    static = M.static_bytes(SMOLLM2_135M, behaviour_copy=True)
    peak = static + M.activation_bytes(SMOLLM2_135M, 5_534 + 5_966, checkpointing=False)
    assert peak > 24 * GIB
    # measured (tests' figures in README): 4,574 tokens without checkpointing peaked at 13.1 GiB;
    # the estimate stays an upper bound within 10 %
    est = static + M.activation_bytes(SMOLLM2_135M, 4_574, checkpointing=False)
    assert 13.1 * GIB <= est <= 1.1 * 13.1 * GIB


def test_auto_plan_switches_checkpointing_on_for_long_trajectories_and_fits() -> None:
    avail = 21 * GIB
    plan = M.plan_memory(SMOLLM2_135M, max_seq_len=8192, micro_batch_size=2, micro_batch_tokens=None,
                         activation_checkpointing=None, behaviour_copy=True, available=avail)
    assert plan.activation_checkpointing and plan.peak_bytes <= M.HEADROOM * avail
    assert plan.micro_batch_tokens == 8192  # one max-length trajectory's worth: the peak of the longest one
    assert "checkpointing because 8,192 tokens would need" in plan.describe()
    short = M.plan_memory(SMOLLM2_135M, max_seq_len=1024, micro_batch_size=2, micro_batch_tokens=None,
                          activation_checkpointing=None, behaviour_copy=True, available=avail)
    assert not short.activation_checkpointing and short.micro_batch_tokens == 1024
    # the user's bound is kept (above max_seq_len too) while it fits
    mine = M.plan_memory(SMOLLM2_135M, max_seq_len=2048, micro_batch_size=8, micro_batch_tokens=4096,
                         activation_checkpointing=None, behaviour_copy=False, available=avail)
    assert mine.micro_batch_tokens == 4096 and not mine.activation_checkpointing
    assert mine.peak_bytes <= M.HEADROOM * avail


@pytest.mark.parametrize(("kw", "names"), [
    ({"activation_checkpointing": None}, ["--max-seq-len 8,192"]),
    ({"activation_checkpointing": False}, ["--max-seq-len", "drop --no-activation-checkpointing"]),
    ({"activation_checkpointing": None, "micro_batch_tokens": 60_000}, ["--micro-batch-tokens"]),
])
def test_a_plan_that_cannot_fit_is_one_line_naming_the_options(kw: dict, names: list[str]) -> None:
    args = dict(max_seq_len=8192, micro_batch_size=2, micro_batch_tokens=None, behaviour_copy=True,
                available=(6 if "micro_batch_tokens" not in kw else 10) * GIB)
    args.update(kw)
    with pytest.raises(M.TrainMemoryError) as e:
        M.plan_memory(SMOLLM2_135M, **args)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("not enough memory") and "nothing was written" in msg
    assert "GiB is available" in msg
    for n in names:
        assert n in msg, msg


def test_model_shape_counts_the_critic_the_trainer_builds() -> None:
    from trajstore.trainer.models import build_critic, load_policy

    loaded = load_policy("tiny-llama", tiny_vocab_size=VOCAB)
    shape = M.model_shape(loaded.model, ModelConfig(name="tiny-llama").critic_trainable_pattern, with_critic=True)
    critic = build_critic(loaded.model)
    assert shape.policy_params == sum(p.numel() for p in loaded.model.parameters())
    assert shape.critic_trainable == sum(p.numel() for p in critic.parameters() if p.requires_grad)
    assert shape.critic_frozen == sum(p.numel() for p in critic.parameters() if not p.requires_grad)
    assert (shape.layers, shape.hidden, shape.vocab) == (2, 64, VOCAB)


def _cfg(store: Path, run_id: str = "r", micro_batch_size: int = 4, **data) -> TrainConfig:
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                       data=DataConfig(batch_size=4, micro_batch_size=micro_batch_size, max_seq_len=512, **data),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id=run_id, progress=False, checkpoint_every=100, max_steps=1))


_PASS = re.compile(r"step 0: (?P<what>[a-z -/0-9]+), micro-batch (?P<j>\d+)/(?P<n>\d+) \((?P<tokens>\d+) tokens")


def test_every_pass_says_what_it_does_and_micro_batches_keep_the_token_bound(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RunRecorder, "ACTIVITY_LOG_EVERY_S", 0.0)  # every line, not one per 10 s
    write_synthetic_store(tmp_path, 4, with_logprobs=False)  # text-only: initial-policy log-probs
    s = train(_cfg(tmp_path, micro_batch_tokens=60, behaviour_logprobs="initial-policy"))
    assert s.steps == 1
    err = capsys.readouterr().err
    assert "memory plan: micro-batches of at most 60 tokens, activation checkpointing off" in err, err
    # the estimate is that of a full micro-batch, and says so (the demo's read as its real peak)
    assert re.search(r"estimated peak \d+\.\d GiB when a micro-batch holds 60 tokens, less for shorter ones", err), err
    passes = [m.groupdict() for m in _PASS.finditer(err)]
    kinds = [p["what"] for p in passes]
    for what in ("initial-policy log-probs", "critic values", "critic update 1/2", "critic update 2/2",
                 "policy update"):
        assert what in kinds, err
    assert all(int(p["tokens"]) <= 60 for p in passes), err
    assert max(int(p["n"]) for p in passes) >= 2  # 4 trajectories of ~25-40 tokens: split by tokens


def _published(store: Path, run_id: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    (f,) = (store / "policies" / run_id / "v1").glob("*.safetensors")
    return load_file(str(f))


def test_a_token_bound_does_not_change_the_update(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_synthetic_store(a, 4)
    write_synthetic_store(b, 4)
    train(_cfg(a))  # one micro-batch of 4
    train(_cfg(b, micro_batch_tokens=40))  # one or two trajectories per micro-batch
    wa, wb = _published(a, "r"), _published(b, "r")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-6)


def test_a_run_that_cannot_fit_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 4)
    monkeypatch.setattr(M, "available_memory_bytes", lambda: 64 << 20)  # 64 MiB left on the machine
    def files() -> list[Path]:  # the shard index (trajectories/_index) is a listing cache, written by any reader
        return sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not {"_tmp", "_index"} & set(p.parts))

    before = files()
    r = CliRunner().invoke(app, ["train", str(tmp_path), "--model", "tiny-llama", "--run-id", "r",
                                 "--batch-size", "4", "--max-seq-len", "512"], env={"TRAJ_TRACEBACK": ""})
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "not enough memory" in lines[0] and "--max-seq-len" in lines[0], r.stderr
    assert files() == before  # no config, no v0, no records


def test_auto_checkpointing_covers_only_the_micro_batches_that_need_it() -> None:
    avail = 21 * GIB
    auto = M.plan_memory(SMOLLM2_135M, max_seq_len=8192, micro_batch_size=2, micro_batch_tokens=None,
                         activation_checkpointing=None, behaviour_copy=True, available=avail)
    fit = auto.checkpoint_above_tokens  # the most tokens that stay under the checkpointed peak without it
    assert 0 < fit < 8192 and auto.peak_bytes <= M.HEADROOM * avail
    static = M.static_bytes(SMOLLM2_135M, behaviour_copy=True)
    assert static + M.activation_bytes(SMOLLM2_135M, fit, checkpointing=False) <= auto.peak_bytes
    assert static + M.activation_bytes(SMOLLM2_135M, fit + 1, checkpointing=False) > auto.peak_bytes
    assert "on for micro-batches of more than" in auto.describe()
    forced = M.plan_memory(SMOLLM2_135M, max_seq_len=8192, micro_batch_size=2, micro_batch_tokens=None,
                           activation_checkpointing=True, behaviour_copy=True, available=avail)
    assert forced.activation_checkpointing and forced.checkpoint_above_tokens == 0


def test_the_loop_checkpoints_only_long_micro_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.utils.checkpoint as tuc

    # the planner's threshold is tested on SmolLM2's shape above; a 2-layer model never gains from
    # checkpointing, so the loop gets a plan that checkpoints micro-batches of more than 40 tokens
    thr = 40
    plan = M.MemoryPlan(micro_batch_tokens=64, activation_checkpointing=True, checkpoint_above_tokens=thr,
                        peak_bytes=1 << 30, available_bytes=8 << 30, static_bytes=1 << 29, reason="test")
    monkeypatch.setattr(M, "plan_memory", lambda *a, **k: plan)
    seen: list[int] = []
    original = tuc.checkpoint

    def counting(fn, *args, **kwargs):  # noqa: ANN001, ANN202
        h = args[0] if args else kwargs["hidden_states"]
        seen.append(int(h.shape[1]))
        return original(fn, *args, **kwargs)

    monkeypatch.setattr(tuc, "checkpoint", counting)
    write_synthetic_store(tmp_path, 8, per_shard=8)
    lens = []
    import trajstore.trainer.loop.micro as L

    pack = L.pack

    def recording_pack(samples, device="cpu"):  # noqa: ANN001, ANN202
        mb = pack(samples, device)
        lens.append(int(mb.input_ids.shape[1]))
        return mb

    monkeypatch.setattr(L, "pack", recording_pack)
    cfg = _cfg(tmp_path, micro_batch_size=2)
    cfg.data.max_seq_len = 64
    train(cfg)
    assert cfg.run.activation_checkpointing is True and cfg.data.micro_batch_tokens >= 64
    assert any(n > thr for n in lens) and any(n <= thr for n in lens), (thr, lens)  # both kinds ran
    assert seen and all(n > thr for n in seen), (thr, seen)  # only the long ones were checkpointed
    assert set(seen) == {n for n in lens if n > thr}
