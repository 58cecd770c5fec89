"""The children `traj demo` and `traj bench throughput` start (serve, proxy, the trainer) are
handed the lifeline's read end and watch it (tests/test_lifeline.py: the mechanism itself)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from trajstore.lifeline import LIFELINE_ENV
from trajstore.trainer.apps.demo import children


class _Config:
    def to_json(self) -> str:
        return "{}"


def test_demo_children_get_the_lifeline(tmp_path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: calls.append((cmd, kw)))
    children.start_traj_child(["serve"], tmp_path / "serve.log")
    children.start_trainer(_Config(), tmp_path / "c.json", tmp_path / "t.log", 1)  # type: ignore[arg-type]
    assert len(calls) == 2
    for cmd, kw in calls:
        assert kw["pass_fds"] == (int(kw["env"][LIFELINE_ENV]),), cmd
    assert calls[0][0][2] == children.TRAJ_CHILD_CODE and "watch_lifeline()" in children.TRAJ_CHILD_CODE
    # the trainer processes (demo train-child, throughput trainer-host) watch it at their start
    apps = Path(children.__file__).parents[1]
    for main in ("demo", "throughput"):
        assert "watch_lifeline()" in (apps / main / "__main__.py").read_text()
