"""trainer/apps/throughput/topology.py: each arm's ``traj proxy`` is started with the benchmark's
poll interval, so its version poll and its staleness gate's re-reads run at ``poll_s`` (how the
proxy paces them: tests/proxy/test_poll_pacing.py), and only ``async`` arms are gated."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from trajstore.proxy.config import ProxyConfig  # noqa: E402
from trajstore.proxy.state import ProxyState  # noqa: E402
from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig  # noqa: E402
from trajstore.trainer.apps.throughput.topology import proxy_argv  # noqa: E402


def _parsed(argv: list[str], monkeypatch) -> ProxyConfig:
    """The config the real ``traj proxy`` command builds from `argv` (the server is not started)."""
    from typer.testing import CliRunner

    import trajstore.proxy.app
    from trajstore.cli.main import app

    got: list[ProxyConfig] = []
    monkeypatch.setattr(trajstore.proxy.app, "run_proxy", lambda cfg, on_ready=None: got.append(cfg))
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    (cfg,) = got
    return cfg


@pytest.mark.parametrize("arm", ["sync", "one-step", "async-2"])
def test_each_arms_proxy_polls_at_the_benchmarks_interval(tmp_path: Path, monkeypatch, arm: str) -> None:
    cfg = ThroughputConfig(poll_s=0.1, batch_size=3, scratch=str(tmp_path))
    spec = Arm.parse(arm)
    argv = proxy_argv(cfg, spec, upstream="http://127.0.0.1:9", store=tmp_path / "store", port=0, run_id="run-a",
                      tokenizer="tok")
    pcfg = _parsed(argv, monkeypatch)
    assert pcfg.poll_s == 0.1 and pcfg.follow_run == "run-a" and pcfg.batch_size == 3
    assert pcfg.max_staleness == (2 if spec.kind == "async" else None)  # the barrier arms are not gated
    state = ProxyState(pcfg)
    assert state.sync is not None and state.sync.poll_s == 0.1  # the next version is looked for every 0.1 s
    if spec.kind == "async":
        assert state.gate is not None and state.gate.poll_s == 0.1 and state.gate.capacity == (2 + 1) * 3
    else:
        assert state.gate is None
