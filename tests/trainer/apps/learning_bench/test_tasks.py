"""trainer/apps/learning_bench/tasks.py and wide_chain.py: the chain100 task, its split into training
and genuinely held-out instances, and the chain tasks' draws unchanged."""

from __future__ import annotations

import random

import pytest

from trajstore.trainer.apps.envs import draw_instance, draw_instance_from, held_out_starts
from trajstore.trainer.apps.learning_bench.tasks import draw, make_episode, split, turns
from trajstore.trainer.apps.learning_bench.wide_chain import WideChainTask, terms


def test_chain100_episode_by_hand() -> None:
    ep = WideChainTask("medium", 95, 6)  # 95 + 11 = 106 -> 06
    assert ep.prompt() == "Se9506|" and ep.expected() == "17" and ep.turns == 3 == turns("chain100", "medium")
    r = ep.step("17")
    assert (r.observation, r.done, r.correct) == ("R17", False, True)
    assert ep.expected() == "28"
    r = ep.step("2")  # not two digits: wrong, and the true term is shown
    assert (r.observation, r.correct) == ("W28", False)
    r = ep.step("39")
    assert r.done and r.reward == pytest.approx(2 / 3)
    assert terms("medium", 95) == {95, 6, 17, 28, 39}
    with pytest.raises(ValueError, match="x1 = x0 \\+ 37"):
        WideChainTask("hard", 10, 48)
    assert make_episode("chain100", ("easy", 99, 0)).prompt() == "Sd9900|"


def test_chain100_held_out_instances_are_never_shown_in_training() -> None:
    """Genuinely held out: no number of a held-out instance appears, in its family, in any
    training instance (prompt or graded term); training keeps most instances; the split is a
    function of the seed. The mod-10 chain cannot do this: every instance of a family is a phase
    of one 10-cycle, so its training instances pass through every held-out number."""
    sp = split("chain100", 7, 3)
    assert sp == split("chain100", 7, 3) and sp != split("chain100", 8, 3)
    for f in sp.held:
        assert len(sp.held[f]) == 3 and len(sp.train[f]) >= 60
        shown = set().union(*(terms(f, x) for x in sp.train[f]))
        assert shown.isdisjoint(set().union(*(terms(f, h) for h in sp.held[f])))
    rng = random.Random(0)
    assert all(x0 in sp.train[f] for f, x0, _ in (draw(rng, sp, held_out=False) for _ in range(500)))
    assert all(x0 in sp.held[f] for f, x0, _ in (draw(rng, sp, held_out=True) for _ in range(100)))
    chain = split("chain", 7, 3)
    passed = {(x0 + k * 3) % 10 for x0 in chain.train["medium"] for k in range(8)}
    assert set(chain.held["medium"]) <= passed  # the mod-10 chain's weakness, for contrast


def test_the_chain_tasks_draw_as_before() -> None:
    """The committed results must reproduce: on the chain tasks the split draws exactly what
    envs.draw_instance / draw_instance_from drew (same instances, same random stream)."""
    starts = held_out_starts(4, 3)
    a, b = random.Random(1), random.Random(1)
    assert [draw(a, split("chain", 4, 3), held_out=False) for _ in range(200)] == \
        [draw_instance_from(b, starts, held_out=False) for _ in range(200)]
    assert [draw(a, split("chain", 4, 3), held_out=True) for _ in range(50)] == \
        [draw_instance_from(b, starts, held_out=True) for _ in range(50)]
    assert [draw(a, split("chain", 4, 0), held_out=False) for _ in range(200)] == [draw_instance(b) for _ in range(200)]


def test_a_chain100_warm_start_never_demonstrates_a_held_out_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm start holding out 3 per family draws its chain100 demonstrations from the training
    instances only; one that holds nothing out keeps its cache key (and its draw) from before."""
    from trajstore.trainer.apps.learning_bench import warmstart

    seen: list[tuple[str, int, int]] = []
    real = warmstart.make_episode

    def spy(task, inst, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append((task, inst[0], inst[1]))
        return real(task, inst, **kw)

    monkeypatch.setattr(warmstart, "make_episode", spy)
    cfg = warmstart.WarmStartConfig(steps=2, batch_episodes=30, tasks=("chain100",), held_out=3)
    warmstart.train_warm_start(5, cfg)
    held = split("chain100", 5, 3).held
    assert len(seen) == 60 and not any(x0 in held[f] for _, f, x0 in seen)
    # the key of a warm start that holds nothing out, as computed before the field existed
    import hashlib
    import json
    from dataclasses import asdict

    from trajstore.trainer.apps.learning_bench.codec import CharCodec

    plain = warmstart.WarmStartConfig()
    old = {k: v for k, v in asdict(plain).items() if k != "held_out"}
    blob = json.dumps({"seed": 0, "codec": CharCodec().name, **old}, sort_keys=True)
    assert plain.key(0) == hashlib.sha256(blob.encode()).hexdigest()[:12] != cfg.key(0)
