"""trajstore/export/blockers.py: every blocker of an export found in one pass and named at once,
each with its count and the options that lift it; the secret scan covering only what would be
exported; `traj export --dry-run` (and `--push --dry-run`) writing nothing. Secrets:
tests/helpers/secrets.py (SmolLM2's tokenizer)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tests.helpers.export import refused_trajectories, three_turn_trajectories, write_store
from tests.helpers.secrets import clean_trajectory, secret_trajectory
from trajstore.cli.main import app
from trajstore.export import ExportError, ExportOptions, export_store


@pytest.fixture(scope="module")
def tok(smol_tokenizer):
    return smol_tokenizer


def test_a_dry_run_lists_every_blocker_with_its_count_and_options(tmp_path):
    store = write_store(tmp_path / "s", three_turn_trajectories() + refused_trajectories())
    r = export_store(store, "verl", str(tmp_path / "out"), ExportOptions(allow_secrets=True, dry_run=True))
    assert not (tmp_path / "out").exists() and r.dry_run and not r.files
    assert [(b.kind, b.count, b.options) for b in r.blockers] == [
        ("missing logprobs", 1, ("--without logprobs", "--skip-refused")),
        ("unknown policy version", 1, ("--without versions", "--skip-refused")),
        ("no reward", 1, ("--without rewards", "--skip-refused"))]
    assert (r.selected, r.exported, dict(r.not_trainable_left_out)) == (5, 2, {"no action tokens": 1})
    # AReaL reads its log-probs and rewards unconditionally: only --skip-refused lifts those
    r = export_store(store, "areal", str(tmp_path / "out"), ExportOptions(allow_secrets=True, dry_run=True))
    assert {b.kind: b.options for b in r.blockers}["missing logprobs"] == ("--skip-refused",)


def test_the_secret_scan_covers_only_what_would_be_exported(tmp_path, tok):
    # before: a trajectory the trainer layout leaves out (not trainable) or --skip-refused leaves out
    # still blocked the export with its secrets
    leaky = secret_trajectory(tok, "s1").model_copy(update={"not_trainable_reason": "redacted: context changed"})
    store = write_store(tmp_path / "s", [clean_trajectory(tok, "c1"), leaky])
    r = export_store(store, "trl", str(tmp_path / "t"), ExportOptions(without=frozenset({"rewards"})))
    assert r.exported == 1 and dict(r.not_trainable_left_out) == {"redacted: context changed": 1}
    with pytest.raises(ExportError, match=r"^refusing to export: traj redact --dry-run finds \d+ secret\(s\)"):
        export_store(store, "hf", str(tmp_path / "h"))  # hf keeps every trajectory: s1 would be exported
    no_reward = secret_trajectory(tok, "s2").model_copy(update={"reward": None, "reward_raw": None})
    store2 = write_store(tmp_path / "s2", [clean_trajectory(tok, "c1"), no_reward])
    r = export_store(store2, "trl", str(tmp_path / "t2"), ExportOptions(skip_refused=True))
    assert r.exported == 1 and dict(r.skipped) == {"no reward": 1}
    # without --skip-refused, --without rewards would let s2 in: its secrets are listed with the refusal
    dry = export_store(store2, "trl", str(tmp_path / "t3"), ExportOptions(dry_run=True))
    assert [b.kind for b in dry.blockers] == ["no reward", "secrets"]


def test_hf_push_dry_run_says_what_would_be_created_and_uploaded(tmp_path):
    store = write_store(tmp_path / "s", three_turn_trajectories())

    class NoHub:  # any call to the Hub fails the test
        def __getattr__(self, name):
            raise AssertionError(f"the dry run called HfApi.{name}")

    r = export_store(store, "hf", str(tmp_path / "hf"), ExportOptions(
        allow_secrets=True, dry_run=True, push="me/trajs", rows_per_file=1), hub_api=NoHub())
    assert not (tmp_path / "hf").exists() and r.pushed is None
    assert r.push_plan["repository"] == "datasets/me/trajs" and "private" in r.push_plan["create"]
    assert r.push_plan["upload"] == ["data/part-00000.parquet", "data/part-00001.parquet", "README.md"]


def test_on_the_fixtures_one_dry_run_names_every_blocker_and_the_next_run_succeeds(ingested_fixtures, tmp_path):
    # before: a TRL export of the shared fixtures took five runs, one blocker named per run
    dry = CliRunner().invoke(app, ["export", ingested_fixtures, "--to", "trl", "--output", str(tmp_path / "trl"),
                                   "--dry-run", "--format", "json"])
    assert dry.exit_code == 1 and not (tmp_path / "trl").exists()
    found = json.loads(dry.stdout)
    kinds = {b["kind"]: b for b in found["blockers"]}
    assert {"missing logprobs", "no reward", "secrets"} <= set(kinds), kinds
    assert all(b["count"] > 0 and b["lifted_by"] for b in kinds.values())
    flags = re.search(r"e\.g\. (.+)$", dry.stderr.strip().splitlines()[-1]).group(1).split()
    res = CliRunner().invoke(app, ["export", ingested_fixtures, "--to", "trl", "--output", str(tmp_path / "trl"),
                                   *flags, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["exported"] > 0
