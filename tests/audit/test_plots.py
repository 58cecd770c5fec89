"""Audit plots with many groups: distinct colours or facets, integer axes, bars on their ticks,
the legend outside the data, all-zero data. The figure is inspected, and every test also saves
its PNG under pytest's tmp_path (look at them with `pytest --basetemp=DIR`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import trajstore as ts
from tests.helpers.stores import consumed_row, layout_trajectory
from trajstore import audit
from trajstore.audit.plots import FACET_COLUMNS, MAX_OVERLAID, _clip, draw_reports, plot_reports
from trajstore.schema import CONSUMED_SCHEMA

pytest.importorskip("matplotlib")

N_SOURCES = 9  # > MAX_OVERLAID: facets
N_RUNS = 8


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """9 sources x 2 trajectories (src-k: actions of 2**(k+1) and 3 tokens at versions 0 and 1,
    reward k/8 and -1); 8 runs consuming them (run-r at trainer versions r+1, r+2: staleness
    r..r+2); run 'calm' masks nothing."""
    root = str(tmp_path_factory.mktemp("plots") / "store")
    trajs = []
    for k in range(N_SOURCES):
        for j, reward in enumerate((k / 8, -1.0)):
            trajs.append(layout_trajectory(f"t{k}-{j}", f"src-{k}", "completed", reward,
                               [("prompt", 2, None, False), ("action", 2 ** (k + 1), 0, True),
                                ("observation", 1, None, False), ("action", 3, 1, True)]))
    ts.write_trajectories(root, trajs)
    store = ts.store.open_store(root)
    for r in range(N_RUNS):
        rows = [consumed_row(f"run-{r}", step, r + 1 + step, f"t{k}-0", 0, 1, 2 ** (k + 1) + 3,
                             0.05 * (r + step), 0.01 * step, 1.0) for step in range(2) for k in range(3)]
        store.write_table(pa.Table.from_pylist(rows, schema=CONSUMED_SCHEMA), subdir=f"runs/run-{r}/consumed")
    rows = [consumed_row("calm", step, 1 + step, "t0-0", 0, 1, 5, 0.0, 0.0, 1.0) for step in range(3)]
    store.write_table(pa.Table.from_pylist(rows, schema=CONSUMED_SCHEMA), subdir="runs/calm/consumed")
    return audit.connect(store)


def _section(fig, i):
    """Visible axes of the i-th report section."""
    return [a for a in fig.subfigs[i].axes if a.get_visible()]


def _draw(tmp_path, name, reports):
    fig = draw_reports(reports)
    fig.savefig(tmp_path / f"{name}.png", dpi=60)
    fig.canvas.draw()
    return fig


def test_many_sources_get_one_panel_each(many, tmp_path):
    fig = _draw(tmp_path, "lengths", {"lengths": audit.length_report(many)})
    axes = _section(fig, 0)
    assert len(axes) == N_SOURCES and N_SOURCES > MAX_OVERLAID
    assert [a.get_title() for a in axes] == [f"src-{k}" for k in range(N_SOURCES)]
    # 9 panels, 4 per row: 3 rows; the figure section is tall enough for them
    assert len({round(a.get_position().y0, 3) for a in axes}) == -(-N_SOURCES // FACET_COLUMNS)
    # src-k's actions: 2**(k+1) + 3 tokens, bin [2**(k+1), 2**(k+2) - 1] for k >= 1 -> one bar of height 2
    for k, a in enumerate(axes):
        heights = [p.get_height() for p in a.patches if p.get_height() > 0]
        assert heights == [2], (k, heights)
    # every row's first panel says what its own y scale counts (one label for the grid sat by the
    # middle row only); the shared x is labelled once below the grid
    assert [a.get_ylabel() for a in axes[::FACET_COLUMNS]] == ["trajectories (count)"] * 3
    assert fig.subfigs[0]._supylabel is None and fig.subfigs[0]._supxlabel.get_text().startswith("action tokens")


def test_bars_sit_on_their_integer_ticks_and_colours_differ(many, tmp_path):
    reports = {"staleness": audit.staleness_report(many, where="source IN ('src-0', 'src-1', 'src-2')")}
    fig = _draw(tmp_path, "staleness", reports)
    # 9 runs (8 + calm): facets, each run's panel has integer ticks only
    axes = _section(fig, 0)
    assert len(axes) == N_RUNS + 1
    for a in axes:
        ticks = a.get_xticks()
        assert all(float(t).is_integer() for t in ticks), ticks
    few = {"staleness": audit.staleness_report(many, run="run-3")}
    fig = _draw(tmp_path, "staleness-one-run", few)
    (ax,) = _section(fig, 0)
    # run-3 consumed at trainer versions 4 and 5 spans of versions 0 and 1: staleness 3..5
    assert [t.get_text() for t in ax.get_xticklabels()] == ["3", "4", "5"]
    centres = sorted(p.get_x() + p.get_width() / 2 for p in ax.patches)
    assert centres == pytest.approx([3, 4, 5])  # one run: the bar is centred on its tick


def test_overlaid_groups_have_distinct_colours_and_the_legend_is_outside(many, tmp_path):
    where = "source IN ('src-1', 'src-2', 'src-3', 'src-4', 'src-5', 'src-6')"
    fig = _draw(tmp_path, "rewards", {"rewards": audit.reward_report(many, where=where)})
    (ax,) = _section(fig, 0)
    colours = {p.get_facecolor() for p in ax.patches}
    assert len(colours) == 6  # MAX_OVERLAID sources, six colours
    legend = ax.get_legend()
    assert legend is not None and legend.get_window_extent().x0 >= ax.get_window_extent().x1
    # every reward bar lies inside the rewards' range [-1, 0.75]
    for p in ax.patches:
        centre = p.get_x() + p.get_width() / 2
        assert -1 - 1e-9 <= centre <= 0.75 + 1e-9


def test_all_zero_clip_rates_get_a_sensible_axis(many, tmp_path):
    fig = _draw(tmp_path, "clip-calm", {"clip": audit.clip_report(many, run="calm")})
    (ax,) = _section(fig, 0)
    bottom, top = ax.get_ylim()
    assert top == 1.0 and -0.05 < bottom < 0  # not -0.04..0.04 around nothing; 0 stays visible
    assert any("no action token\nwas masked" in t.get_text() for t in ax.texts)
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_empty_report_says_why(tmp_store, tmp_path):
    ts.write_trajectories(tmp_store, [layout_trajectory("A", "sdk", "completed", None,
                                                        [("prompt", 1, None, False)])])
    conn = audit.connect(tmp_store)
    fig = _draw(tmp_path, "empty", {"clip": audit.clip_report(conn), "rewards": audit.reward_report(conn)})
    texts = [t.get_text() for i in range(2) for a in _section(fig, i) for t in a.texts]
    assert texts == ["no training run consumed the selected trajectories", "no selected trajectory has a reward"]
    # the CLI's "wrote x.png (...)" names an empty section as such, not as drawn
    assert plot_reports({"clip": audit.clip_report(conn)}, tmp_path / "x.png") == ["clip (no data)"]
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"


def test_a_source_keeps_its_colour_in_every_section(many, tmp_path):
    # the rewards show src-0 and src-2, the lengths src-0, src-1, src-2: src-2 is the second
    # group of one section and the third of the other, and keeps one colour
    where = "source IN ('src-0', 'src-1', 'src-2')"
    reports = {"rewards": audit.reward_report(many, where="source IN ('src-0', 'src-2')"),
               "lengths": audit.length_report(many, where=where)}
    fig = _draw(tmp_path, "colours", reports)
    colour_of = []
    for i in range(2):
        (ax,) = _section(fig, i)
        handles, labels = ax.get_legend_handles_labels()
        colour_of.append({label: h.patches[0].get_facecolor() for h, label in zip(handles, labels)})
    assert set(colour_of[0]) == {"src-0", "src-2"} and set(colour_of[1]) == {"src-0", "src-1", "src-2"}
    assert colour_of[0]["src-2"] == colour_of[1]["src-2"]
    assert len(set(colour_of[1].values())) == 3


def test_binary_rewards_are_two_labelled_bars_not_slivers(tmp_store, tmp_path):
    # rewards 0 and 1 only: 2 of the 20 equal-width bins are occupied, [0, 0.05) and [0.95, 1]
    trajs = [layout_trajectory(f"b{i}", "sdk", "completed", float(i % 2), [("prompt", 1, None, False)])
             for i in range(6)]
    ts.write_trajectories(tmp_store, trajs)
    fig = _draw(tmp_path, "binary", {"rewards": audit.reward_report(audit.connect(tmp_store))})
    (ax,) = _section(fig, 0)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0 to 0.05", "0.95 to 1"]
    bars = [p for p in ax.patches if p.get_height() > 0]
    assert sorted(p.get_height() for p in bars) == [3, 3]  # 3 zeros, 3 ones
    assert all(p.get_width() >= 0.5 for p in bars)  # wide bars on a category axis (0.8 of a slot)


def test_an_empty_section_takes_one_line_of_height(many, tmp_store, tmp_path):
    ts.write_trajectories(tmp_store, [layout_trajectory("A", "sdk", "completed", 1.0, [("prompt", 1, None, False)])])
    conn = audit.connect(tmp_store)
    fig = _draw(tmp_path, "empty-and-full", {"clip": audit.clip_report(conn), "rewards": audit.reward_report(conn)})
    empty, full = (fig.subfigs[i].bbox.height for i in range(2))
    assert empty < full / 2  # "no training run ..." needs a line, not a full-height blank axes


def test_faceted_clip_key_sits_beside_the_panels(many, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = _draw(tmp_path, "clip-facets", {"clip": audit.clip_report(many)})
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    axes = _section(fig, 0)
    assert len(axes) == N_RUNS + 1 > MAX_OVERLAID
    (legend,) = fig.subfigs[0].legends
    # what is drawn (line samples and labels) lies right of every panel; the legend's own box
    # padding may touch the last column
    left = min(a.get_window_extent(renderer).x0 for a in [*legend.legend_handles, *legend.get_texts()])
    assert all(left >= a.get_window_extent(renderer).x1 for a in axes)
    assert [t.get_text().split("\n")[0] for t in legend.get_texts()] == ["below band", "above band"]
    # the key's line styles are drawn in the panels' one colour (a grey sample matched no line)
    from matplotlib.colors import to_rgba

    drawn = {to_rgba(line.get_color()) for a in axes for line in a.get_lines()}
    assert len(drawn) == 1 and {to_rgba(h.get_color()) for h in legend.legend_handles} == drawn


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("steps", [[0], [0, 1, 2], list(range(40))])
def test_clip_plot_steps_are_whole_numbers_with_room_around_them(steps: list[int]) -> None:
    from types import SimpleNamespace

    pytest.importorskip("matplotlib")
    import duckdb
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure


    rows = ", ".join(f"('r1', {s}, 0.0, 0.0)" for s in steps)
    rel = duckdb.sql(f"SELECT * FROM (VALUES {rows}) AS t(run_id, step, masked_below, masked_above)")
    fig = Figure()
    _clip(fig, SimpleNamespace(by_step=rel), {})
    ax = fig.axes[0]
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert all(float(t).is_integer() for t in ticks) and ticks, ticks
    assert lo <= min(steps) - 0.5 and hi >= max(steps) + 0.5  # the points sit inside, not on the frame
    if len(steps) == 1:
        assert ticks == [steps[0]]
