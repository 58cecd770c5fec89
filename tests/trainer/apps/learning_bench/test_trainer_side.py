"""trainer/apps/learning_bench/trainer_side.py: the no-correction loss makes every ratio one."""

from __future__ import annotations

import pytest
import torch


def test_no_correction_makes_every_ratio_one() -> None:
    from trajstore.trainer.apps.learning_bench.trainer_side import no_correction_loss
    from trajstore.trainer.sao.losses import dis_policy_loss

    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    rollout = torch.tensor([[-3.0, -2.0, 0.0]])  # ratios e^2, 1, e^-0.5: DIS would mask the first
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones((1, 3), dtype=torch.bool)
    loss, st = no_correction_loss(dis_policy_loss)(lp, rollout, adv, mask, 0.3, 5.0)
    assert float(st.ratio_mean) == 1.0 and float(st.frac_zero_grad) == 0.0
    loss.backward()
    # plain policy gradient of -mean(A * log pi): d/dlp = -A / 3
    assert lp.grad[0].tolist() == pytest.approx([-1 / 3, 1 / 3, -2 / 3])


def test_keyed_running_mean_keeps_one_window_per_family_by_hand() -> None:
    """running-mean-family: each trajectory's baseline is the mean of the last `window` rewards of
    its own family seen before this batch (0 before any)."""
    from types import SimpleNamespace

    from trajstore.trainer.apps.learning_bench.trainer_side import keyed_running_mean

    fam = {"a": "easy", "b": "hard", "c": "easy", "d": "hard", "e": "easy"}
    fn = keyed_running_mean(2, lambda s: fam[s.trajectory_id])

    def batch(*pairs: tuple[str, float]) -> list:
        return [SimpleNamespace(trajectory_id=t, reward=r) for t, r in pairs]

    assert fn(batch(("a", 1.0), ("b", 0.2)), None) == {"a": 1.0, "b": pytest.approx(0.2)}
    # easy window [1.0], hard window [0.2]
    assert fn(batch(("c", 0.5), ("d", 0.4), ("e", 0.9)), None) == {"c": -0.5, "d": pytest.approx(0.2), "e": pytest.approx(-0.1)}
    # easy window (2) [0.5, 0.9] -> 0.7; hard [0.2, 0.4] -> 0.3
    assert fn(batch(("a", 0.7), ("b", 0.3)), None) == {"a": pytest.approx(0.0), "b": pytest.approx(0.0)}


@pytest.mark.parametrize("full", [False, True])
def test_moe_critic_replaces_the_policy_critic_with_attention_frozen_or_not(tmp_path, full: bool) -> None:
    """moe-critic / moe-full-critic: the trainer's critic becomes one built by build_critic from a
    tiny Qwen3-MoE LM (2 layers, 4 experts), with attention, router, embeddings and norms frozen
    (or every parameter training), and the critic optimiser holds exactly its trainable parameters."""
    from trajstore.trainer.apps.learning_bench.spec import RunSpec
    from trajstore.trainer.apps.learning_bench.trainer_side import train_config, use_moe_critic
    from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig, ensure_warm_start
    from trajstore.trainer.loop.setup import setup

    warm = ensure_warm_start(tmp_path, 0, WarmStartConfig(steps=1, batch_episodes=4))
    moe = ensure_warm_start(tmp_path, 0, WarmStartConfig(steps=1, batch_episodes=4, model="tiny-qwen3-moe"))
    assert moe != warm and moe.name.startswith("tiny-qwen3-moe-s0-")
    spec = RunSpec(task="chain", arm="moe-full-critic" if full else "moe-critic", seed=0, warm_start=str(warm),
                   critic_warm_start=str(moe), policy_lr=5e-4, batch_size=4)
    tr = setup(train_config(spec, str(tmp_path / "store")), allow_empty=True)
    try:
        use_moe_critic(tr, str(moe), full=full)
        assert tr.critic.backbone.config.model_type == "qwen3_moe"
        train = {n for n, p in tr.critic.named_parameters() if p.requires_grad}
        assert any(".mlp.experts." in n for n in train) and "value_head.weight" in train
        attn_router = [n for n, _ in tr.critic.named_parameters() if ".self_attn." in n or n.endswith("mlp.gate.weight")]
        assert attn_router and all((n in train) == full for n in attn_router)
        opt = {id(p) for g in tr.optimizers["critic"].param_groups for p in g["params"]}
        assert opt == {id(p) for p in tr.critic.parameters() if p.requires_grad}
    finally:
        tr.stream.close()
        if tr.recorder is not None:
            tr.recorder.close()
