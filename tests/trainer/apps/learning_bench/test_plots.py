"""The learning benchmark's figures (looked at, fixed what a reader stumbles on):
one staleness colour key beside the log-ratio panels, the pooled last level labelled "8+"; legend
entries drawn exactly as the lines they name; every data panel labelled with its unit; a one-arm,
one-seed (smoke) figure neither clipped nor promising an interval."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")


def test_log_ratio_figure_has_one_key_beside_the_panels(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from trajstore.trainer.apps.learning_bench import plots

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


@pytest.fixture
def kept_figures(monkeypatch):
    import matplotlib.pyplot as plt

    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    yield figures
    for fig in figures:
        close(fig)


def _style(line):  # noqa: ANN001, ANN202
    from matplotlib.colors import to_hex

    return to_hex(line.get_color()), line.get_linestyle()


def test_diagnostics_legend_matches_the_lines_and_every_panel_has_a_unit(tmp_path, kept_figures):
    from trajstore.trainer.apps.learning_bench import plots

    def hist(scale: float, ev: bool) -> list[dict]:
        rows = [{"step": -1, "grad_norm": 9.0, "entropy": 9.0, "zero_grad": 9.0}]  # warm-up: not plotted
        for s in range(6):
            row = {"step": s, "grad_norm": scale * (1 + s), "entropy": 1 - 0.1 * s, "zero_grad": 0.01 * s}
            if ev:
                row["explained_variance"] = 0.1 * s
            rows.append(row)
        return rows

    arms = {"sao": (1.0, True), "grpo-dis": (2.0, False), "grpo-no-dis": (3.0, False), "gae-turn-avg": (1.5, True)}
    histories = {a: [hist(sc, ev), hist(sc, ev)] for a, (sc, ev) in arms.items()}
    plots.diagnostics_plot(histories, tmp_path / "d.png", title="t", smooth=1)
    (fig,) = kept_figures
    key_ax = next(ax for ax in fig.axes if ax.get_legend() is not None)
    data = [ax for ax in fig.axes if ax is not key_ax]
    # a 2 x 2 grid (one row of four was a 2000 x 400 figure): two rows of panels
    assert len(data) == 4 and len({round(ax.get_position().y0, 3) for ax in data}) == 2
    legend = key_ax.get_legend()
    keyed = {t.get_text(): _style(h) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert set(keyed) == set(arms)
    assert len(set(keyed.values())) == len(keyed)  # no two arms look alike in the key
    assert keyed["grpo-dis"][1] != keyed["grpo-no-dis"][1]  # the GRPO pair differs in more than shade
    for ax in data:
        assert ax.get_ylabel() and ax.get_xlabel() == "policy step"
        drawn = {_style(line) for line in ax.get_lines()}
        assert drawn <= set(keyed.values())  # every line is one the key names
    # arms without a value are absent from the explained-variance panel, the others keep their style
    assert {_style(line) for line in data[3].get_lines()} == {keyed["sao"], keyed["gae-turn-avg"]}


def test_one_arm_one_seed_staleness_figure_is_whole_and_keys_bar_kinds_in_outline(tmp_path, kept_figures):
    from matplotlib.container import ErrorbarContainer

    from trajstore.trainer.apps.learning_bench import plots

    plots.staleness_plot({"sao": (1.25, 2.5, 2.5, 2.5)}, tmp_path / "s.png", title="staleness of trained tokens: "
                         "single rollout vs GRPO groups of 4", seeds=1)
    (fig,) = kept_figures
    fig.canvas.draw()
    box = fig._suptitle.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # the title was cut at both ends with one arm
    assert "1 seed" in fig._suptitle.get_text()
    (ax,) = fig.axes
    assert not [c for c in ax.containers if isinstance(c, ErrorbarContainer)]  # no whiskers from one seed
    for patch in ax.get_legend().get_patches():  # bar kinds, not a grey that no bar has
        assert patch.get_facecolor()[:3] == (1.0, 1.0, 1.0)
    assert "policy versions" in ax.get_ylabel()


def test_forest_key_lists_only_the_verdicts_drawn(tmp_path, kept_figures):
    from trajstore.trainer.apps.learning_bench import plots

    rows = [{"label": "a - sao", "mean": -0.01, "low": -0.02, "high": 0.01, "verdict": "not reproduced", "unit": "u"},
            {"label": "b - sao", "mean": -0.03, "low": -0.05, "high": -0.01, "verdict": "reproduced", "unit": "u"}]
    plots.forest_plot(rows, tmp_path / "f.png", title="t")
    (fig,) = kept_figures
    legend = fig.axes[0].get_legend()
    assert sorted(t.get_text() for t in legend.get_texts()) == ["not reproduced", "reproduced"]
    assert plots.ci_note(1) == "no interval" and plots.ci_note(5) == "95% t-interval"


def test_curves_panels_share_one_labelled_scale_and_skip_a_panel_of_sao_alone(tmp_path, kept_figures):
    from trajstore.trainer.apps.learning_bench import plots

    evals = [[{"step": s, "reward": 0.5 + 0.01 * s} for s in (0, 5, 10)]]
    groups = {"critic vs baselines": ["sao", "running-mean-128"], "GAE variants": ["sao", "gae-no-skip"]}
    plots.curves_plot(groups, {"sao": evals, "running-mean-128": evals}, tmp_path / "c.png", title="t")
    (fig,) = kept_figures
    *data, key_ax = fig.axes
    assert [ax.get_title() for ax in data] == ["critic vs baselines"]  # "GAE variants" would be sao alone
    plots.curves_plot(groups, {"sao": evals}, tmp_path / "c1.png", title="t")  # smoke: sao only, one panel
    *data1, _ = kept_figures[1].axes
    assert len(data1) == 1 and data1[0].get_ylabel()
    plots.curves_plot({"g1": ["sao", "sao-k1"], "g2": ["sao", "gae-no-skip"]},
                      {a: evals for a in ("sao", "sao-k1", "gae-no-skip")}, tmp_path / "c2.png", title="t")
    *data2, key2 = kept_figures[2].axes
    assert all(ax.get_ylabel() for ax in data2)
    assert data2[0].get_shared_y_axes().joined(data2[0], data2[1])
    keyed = {t.get_text(): _style(h) for t, h in zip(key2.get_legend().get_texts(), key2.get_legend().legend_handles)}
    for ax in data2:
        assert {_style(line) for line in ax.get_lines()} <= set(keyed.values())


def test_staleness_title_names_only_the_arms_shown():
    # the smoke preset's figure showed sao alone under "single rollout vs GRPO groups of 4"
    from trajstore.trainer.apps.learning_bench.analysis import staleness_title

    assert staleness_title(["sao"]) == "staleness of trained tokens: single rollout, sao"
    assert staleness_title(["sao", "no-correction"]) == "staleness of trained tokens: single rollout"
    assert staleness_title(["sao", "grpo-dis"]) == "staleness of trained tokens: single rollout vs GRPO groups of 4"
    assert staleness_title(["grpo-dis", "grpo-no-dis"]) == "staleness of trained tokens: GRPO groups of 4"
