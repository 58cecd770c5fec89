"""The learning benchmark's log-ratio figure (issue 16: looked at, fixed what a reader stumbles on):
one staleness colour key beside the histogram panels instead of a legend over each panel's
curves, and the pooled last level labelled "8+" on both."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")


def test_log_ratio_figure_has_one_key_beside_the_panels(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from trajstore.trainer.learning_bench import plots

    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))  # keep the figure to inspect it
    edges = [-2.0, -1.0, 0.0, 1.0, 2.0]  # 4 bins + the two beyond-the-edge bins = 6 counts
    hists = {arm: {lvl: [0, 1, 5 + lvl, 5, 1, 0] for lvl in range(9)} for arm in ("sao", "no-correction")}
    bands = {arm: {lvl: [12 + lvl, 1, 0] for lvl in range(9)} for arm in hists}
    path = plots.log_ratio_plot(hists, bands, edges, tmp_path / "lr.png", title="t", eps=(0.3, 5.0))
    assert (tmp_path / "lr.png").read_bytes()[:4] == b"\x89PNG" and path.endswith("lr.png")
    (fig,) = figures
    hist_axes, band_ax = fig.axes[:2], fig.axes[2]
    assert all(ax.get_legend() is None for ax in hist_axes)
    (key,) = fig.axes[3:]  # the colour bar: levels 0..8, the last pooling 8 and more
    assert [t.get_text() for t in key.get_yticklabels()] == [*map(str, range(8)), "8+"]
    assert [t.get_text() for t in band_ax.get_xticklabels()] == [*map(str, range(8)), "8+"]
    close(fig)
