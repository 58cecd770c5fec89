"""A command that needs an optional extra fails with one line naming the pip install, before
doing any work (the missing module is simulated: find_spec answers None for it)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from trajstore.cli.main import app
from trajstore.errors import MissingExtraError
from trajstore.extras import require


@pytest.fixture
def without(monkeypatch):
    def hide(*names: str) -> None:
        real = importlib.util.find_spec

        def find_spec(name, *a, **kw):
            return None if name.split(".")[0] in names else real(name, *a, **kw)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return hide


def test_require_names_what_is_missing_and_the_install(without):
    without("matplotlib")
    with pytest.raises(MissingExtraError, match=r"^--plot needs matplotlib: pip install 'trajstore\[plot\]'$"):
        require(("numpy", "matplotlib"), what="--plot", install="pip install 'trajstore[plot]'")
    require(("numpy",), what="x", install="y")  # present: no error


def test_stats_plot_without_matplotlib_is_one_line_and_prints_no_tables(without, tmp_path, make_trajectory):
    store = str(tmp_path / "s")
    ts.write_trajectories(store, [make_trajectory(np.random.default_rng(0), trajectory_id="t")])
    without("matplotlib")
    res = CliRunner().invoke(app, ["stats", store, "--rewards", "--plot", str(tmp_path / "p.png")])
    assert res.exit_code == 1
    assert res.output == "error: --plot needs matplotlib: pip install 'trajstore[plot]'\n"
    assert not (tmp_path / "p.png").exists()


def test_tokenizer_without_transformers_is_one_line(without, tmp_path):
    from trajstore.hub import load_tokenizer

    without("transformers")
    with pytest.raises(MissingExtraError, match=r"needs transformers: pip install torch==2\.13\.0 && pip install "
                                                r"'trajstore\[train\]'$"):
        load_tokenizer(str(tmp_path))  # a (local Hugging Face) directory: only transformers is needed


def test_serve_without_the_train_extra_is_one_line(without, monkeypatch):
    # it raised ModuleNotFoundError with a traceback from inside the model loader
    pytest.importorskip("torch")
    monkeypatch.setattr("trajstore.trainer.serving.serve.run_serve", lambda cfg, on_ready=None: None)  # never serve here
    without("torch")
    res = CliRunner().invoke(app, ["serve", "--model", "tiny-llama", "--port", "0"])
    assert res.exit_code == 1
    assert res.output == ("error: traj serve needs torch: pip install torch==2.13.0 && pip install "
                          "'trajstore[train]'\n")
