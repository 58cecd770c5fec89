"""trajstore/cli/display.py: how traj prints results: number formats and the width-aware table
layout, on hand-made tables (expected strings written by hand). One value's format:
test_cells.py; the key columns: test_table_layout.py."""

from __future__ import annotations

import io
import json

from rich.console import Console

from trajstore.cli.cells import column_formatter
from trajstore.cli.display import OutputFormat, print_command, render_record, render_tables
from trajstore.tables import TableData


def _render(tables: list[TableData], width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
    render_tables(tables, OutputFormat.table, console=console)
    return console.file.getvalue()


def _fmt(name: str, values: list) -> list[str]:
    f = column_formatter(name, values)
    return [f(v) for v in values]


def test_shares_always_have_three_decimals():
    # 0 and 1 must not print as "0" / "1" in one place and "0.000" in another
    assert _fmt("share_with_logprob", [0.0, 1.0, 0.25]) == ["0.000", "1.000", "0.250"]
    assert _fmt("masked_below", [2 / 3, None]) == ["0.667", "-"]
    assert _fmt("perf/data_wait_frac", [1.2e-5]) == ["0.000"]
    assert _fmt("share", [1.0]) == ["1.000"]
    # a share whose name does not say so is declared by the caller
    assert column_formatter("solved", [1.0], share=True)(1.0) == "1.000"
    out = _render([TableData("reward", ["version", "solved"], [(0, 0.0), (1, 1.0)], shares=["solved"])], 60)
    assert "1.000" in out and "0.000" in out


def _wide_steps() -> TableData:
    cols = ["run_id", "step"] + [f"policy/metric_{i}" for i in range(6)] + [f"critic/metric_{i}" for i in range(6)]
    rows = [("r1", s) + tuple(0.1 * s + i for i in range(12)) for s in range(10)]
    return TableData("result", cols, rows)


def test_wide_table_keeps_the_key_in_every_part_and_the_constant_in_the_title():
    out = _render([_wide_steps()], width=80)
    titles = [line for line in out.splitlines() if line.startswith("result")]
    assert len(titles) >= 2, out
    assert "(run_id=r1)" in titles[0]  # constant column moved to the title (the first part's only) ...
    assert not any("run_id" in t for t in titles[1:])
    assert "run_id " not in out.replace("run_id=r1", "")  # ... and not repeated as a column
    parts = out.split("\nresult")
    for part in parts:
        header = next(line for line in part.splitlines() if "┃" in line)
        assert header.split("┃")[1].strip() == "step", header  # the key comes first in every part
    # one family per part: headers drop the family prefix, the title names it
    assert any(t.endswith(": policy]") for t in titles) and any(t.endswith(": critic]") for t in titles)
    assert max(len(line) for line in out.splitlines()) <= 80


def test_wide_table_with_few_rows_is_transposed():
    cols = ["run_id"] + [f"token_p{p}" for p in (50, 90, 99)] + ["consumed", "action_tokens", "a_long_column_name"]
    out = _render([TableData("staleness.by_run", cols, [("r1", 0, 1, 2, 64, 1105, 7), ("r2", 3, 4, 5, 8, 9, 10)])],
                  width=40)
    lines = out.splitlines()
    assert lines[0] == "staleness.by_run"
    assert "r1" in lines[2] and "r2" in lines[2]  # the rows' keys became the header
    assert any(line.startswith("│ action_tokens ") for line in lines)
    assert max(len(line) for line in lines) <= 40


def test_empty_tables_collapse_into_one_line_per_report():
    empty = [TableData(f"clip.{t}", ["run_id", "step"], [], empty_note="no training run consumed them")
             for t in ("by_step", "by_staleness")]
    half = [TableData("staleness.by_run", ["run_id"], [], empty_note="none consumed"),
            TableData("staleness.by_source", ["run_id"], [], empty_note="none consumed"),
            TableData("staleness.unconsumed", ["source", "n"], [("sdk", 1), ("x", 2)])]
    out = _render(empty + half, width=100)
    assert "(no rows)" not in out
    assert "clip: no rows (no training run consumed them)" in out
    assert "staleness.by_run, staleness.by_source: no rows (none consumed)" in out
    assert "staleness.unconsumed" in out and "by_step" not in out


def test_long_text_is_shortened_with_a_pointer_to_full_output():
    rows = [("sdk", "x" * 150), ("openhands", "y" * 20)]
    out = _render([TableData("coverage.not_trainable", ["source", "example_id"], rows)], width=60)
    assert max(len(line) for line in out.splitlines()) <= 60
    assert "…" in out and "--format csv or json" in out
    assert "openhands" in out  # the key column is never shortened


def test_long_text_columns_are_shortened_rather_than_cut_into_parts():
    # `traj sql` of trajectory_id, num_tokens, metadata at 80 (and 200) columns printed two parts
    # that repeated the 72-character id, and the metadata part still showed only `{"exit…`.
    ids = [f"nebius-swe-agent:repo__name-{i}_17:9e0628dfefc4fe64d363aaaaaaaaaaaaaaaa" for i in range(6)]
    meta = ['{"exit_status": "submitted", "ingest": {"format": "nebius/swe-agent", "line": %d, '
            '"path": "../shared/fixtures/trajectories/nebius/x.jsonl"}}' % i for i in range(6)]
    rows = [(t, 5000 + i, m) for i, (t, m) in enumerate(zip(ids, meta))]
    for width in (80, 200):
        out = _render([TableData("result", ["trajectory_id", "num_tokens", "metadata"], rows)], width=width)
        lines = out.splitlines()
        assert lines[0] == "result", out  # one table, no "[1/2]"
        header = next(line for line in lines if "┃" in line)
        assert [h.strip() for h in header.split("┃")[1:-1]] == ["trajectory_id", "num_tokens", "metadata"]
        assert max(map(len, lines)) <= width and "--format csv or json" in out
        assert '{"exit_status": "submitted"' in out  # the shortened column keeps a readable start


def test_few_wide_rows_with_long_keys_are_transposed_under_row_numbers():
    # `traj sql STORE "SELECT * FROM trajectories LIMIT 3"` at 80 columns: nine parts, one column each
    cols = ["trajectory_id", "prompt_id", "num_tokens", "num_prompt_tokens", "num_action_tokens", "metadata"]
    rows = [(f"nebius-swe-agent:tomerfiliba__plumbum-{i}_17:9e0628dfefc4fe64d363", f"tomerfiliba__plumbum-{i}",
             5534 + i, 2057 - i, 465 + i, '{"exit_status": "submitted", "line": %d}' % i) for i in range(3)]
    out = _render([TableData("result", cols, rows)], width=80)
    lines = out.splitlines()
    assert lines[0] == "result" and max(map(len, lines)) <= 80, out
    header = next(line for line in lines if "┃" in line)
    assert [h.strip() for h in header.split("┃")[1:-1]] == ["column", "row 1", "row 2", "row 3"]
    assert any(line.startswith("│ num_prompt_tokens ") and "2056" in line for line in lines), out
    assert any(line.startswith("│ trajectory_id ") for line in lines), out


def test_print_command_is_one_unstyled_line():
    cmd = "traj sql ./demo-store \"SELECT * FROM step_metrics WHERE run_id = 'demo-20260701T000000Z' ORDER BY step\""
    console = Console(width=40, file=io.StringIO(), force_terminal=True)
    print_command(console, cmd)
    assert console.file.getvalue() == cmd + "\n"  # no wrap, no escape codes


def test_json_and_csv_keep_full_precision():
    t = TableData("result", ["source", "mean"], [("a", 14162.345678), ("b", None)])
    buf = io.StringIO()
    render_tables([t], "json", out=buf)
    assert json.loads(buf.getvalue()) == {"result": [{"source": "a", "mean": 14162.345678},
                                                     {"source": "b", "mean": None}]}
    buf = io.StringIO()
    render_tables([t], "csv", out=buf)
    assert buf.getvalue() == "source,mean\na,14162.345678\nb,\n"


def test_render_record_formats():
    rec = {"run_id": "r1", "steps": 3, "last_metrics": {"policy/loss": 0.5}}
    buf = io.StringIO()
    render_record("traj train", rec, "csv", out=buf)
    assert buf.getvalue() == "run_id,steps,last_metrics.policy/loss\nr1,3,0.5\n"
    buf = io.StringIO()
    render_record("traj train", rec, "json", out=buf)
    assert json.loads(buf.getvalue()) == rec
    console = Console(width=60, file=io.StringIO(), color_system=None)
    render_record("traj train", rec, "table", console=console)
    out = console.file.getvalue()
    assert out.startswith("traj train\n") and "last_metrics.policy/loss" in out and "0.500" in out
    # an empty list is nothing, printed like a missing value (`traj migrate` showed `shards │ []`)
    console = Console(width=60, file=io.StringIO(), color_system=None)
    render_record("traj migrate", {"shards_migrated": 0, "shards": []}, "table", console=console)
    assert "│ shards          │ -     │" in console.file.getvalue(), console.file.getvalue()


def test_sizes_formatted_for_people_align_right_like_numbers():
    out = _render([TableData("runs", ["run", "size"], [("a", "6.4 KB"), ("bb", "512 B"), ("c", None)])], 40)
    # right-aligned: the unit letters line up at the column's right edge ("6.4 KB" is 6 wide, "512 B" 5)
    assert "│ a   │ 6.4 KB │" in out and "│ bb  │  512 B │" in out, out
    out = _render([TableData("t", ["run", "note"], [("a", "6.4 KB free"), ("bb", "x")])], 40)
    assert "│ bb  │ x           │" in out, out  # other text stays left-aligned ("6.4 KB free" is 11 wide)


def test_columns_without_values_are_named_once_in_the_title():
    # `staleness.by_source (run_id=r1, token_p50=-, token_p90=-, ... traj_max=-, ...)` listed eleven dashes
    cols = ["source", "consumed", "token_p50", "token_p90", "token_max", "traj_max", "policy/loss", "policy/kl"]
    rows = [("a", 1, None, None, None, None, None, None), ("b", 2, None, None, None, None, None, None)]
    out = _render([TableData("staleness.by_source", cols, rows)], width=100)
    assert out.splitlines()[0] == ("staleness.by_source (no values: token_{p50,p90,max}, traj_max, "
                                   "policy/{loss,kl})"), out


def test_constants_join_a_title_that_ends_in_brackets():
    # `paper claims (1 seed, CI n/a, 0.3 min) (comparison=..., verdict=...)`
    rows = [("x - sao", "auc", 0.1, "undetermined"), ("x - sao", "corr", 0.2, "undetermined")]
    out = _render([TableData("paper claims (1 seed, 0.3 min)", ["comparison", "metric", "difference", "verdict"],
                             rows)], width=100)
    assert out.splitlines()[0] == "paper claims (1 seed, 0.3 min; comparison=x - sao, verdict=undetermined)", out
