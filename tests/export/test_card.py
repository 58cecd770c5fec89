"""trajstore/export/card.py: the dataset card's numbers are those `traj stats --format json` prints
for the same trajectories (the known audit store: statuses, null rewards, missing log-probs,
unversioned actions, consumed trajectories), with or without --where / --limit / --run."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tests.helpers.export import UNCHECKED
from trajstore.cli.main import app
from trajstore.export import ExportOptions, export_store
from trajstore.export.card import CARD_TABLES


def _card(out):
    return (out / "README.md").read_text()


def _card_stats(text: str) -> dict:
    block = re.search(r"```json\n(.*?)\n```", text, re.S)
    assert block, text
    return json.loads(block.group(1))


def _traj_stats(store, where: str | None) -> dict:
    res = CliRunner().invoke(app, ["stats", store.uri, "--all", "--format", "json", *(["--where", where] if where else [])])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    return {t: doc[t] for t in CARD_TABLES}


@pytest.mark.parametrize("where", [None, "source = 'sdk'", "reward IS NOT NULL AND status <> 'failed'"])
def test_card_numbers_equal_traj_stats(known_store, tmp_path, where):
    out = tmp_path / "hf"
    export_store(known_store, "hf", str(out), ExportOptions(allow_secrets=True, where=where))
    text = _card(out)
    stats = _card_stats(text)
    assert stats == _traj_stats(known_store, where)
    assert stats["overview.totals"][0]["trajectories"] > 0 and stats["staleness.by_run"]  # not empty by accident
    quoted = " --all" if where is None else " --all --where '" + where.replace("'", "'\\''") + "'"
    assert f"Every number below is what `traj stats STORE{quoted}` prints." in text


@pytest.mark.parametrize(("opts", "ids"), [
    (ExportOptions(allow_secrets=True, limit=2), ["A", "B"]),  # the first two in arrival order
    (ExportOptions(allow_secrets=True, run="r2"), ["A"]),  # runs/r2/consumed holds A only
    # r1 consumed A, B (sdk) and C (openhands)
    (ExportOptions(allow_secrets=True, where="source = 'sdk'", run="r1"), ["A", "B"]),
])
def test_card_of_a_narrower_export_counts_exactly_the_exported(known_store, tmp_path, opts, ids):
    out = tmp_path / "hf"
    r = export_store(known_store, "hf", str(out), opts)
    assert r.exported == len(ids)
    text = _card(out)
    literal = ", ".join(f"'{i}'" for i in ids)
    assert _card_stats(text) == _traj_stats(known_store, f"trajectory_id IN ({literal})")
    assert "over exactly the exported trajectories" in text and "Every number below is what" not in text


def test_card_licence_to_fill_or_given(known_store, tmp_path):
    export_store(known_store, "hf", str(tmp_path / "a"), UNCHECKED)
    text = _card(tmp_path / "a")
    assert text.startswith("---\nlanguage:\n- en\nlicense: other  # TO FILL")
    assert "TO FILL: set `license` above" in text
    export_store(known_store, "hf", str(tmp_path / "b"),
                 ExportOptions(allow_secrets=True, license="cc-by-4.0", name="my trajectories"))
    text = _card(tmp_path / "b")
    assert "\nlicense: cc-by-4.0\n" in text and "\npretty_name: my trajectories\n" in text
    assert "TO FILL" not in text and "# my trajectories\n" in text


def test_card_says_what_is_approximated(known_store, tmp_path):
    # known store: D has an action without a policy version and no log-probs; E has no action at all
    export_store(known_store, "hf", str(tmp_path / "hf"), UNCHECKED)
    text = _card(tmp_path / "hf")
    assert "without a policy version: 1," in text
    assert "| openhands | engine |" in text  # coverage.tokens rows per source and token source
