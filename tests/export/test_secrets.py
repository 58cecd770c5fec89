"""trajstore/export/run.py + refusals.py: `traj export` writes nothing while `traj redact --dry-run`
would fail on the selected trajectories (a secret found, or spans that cannot be scanned); the
error names how many secrets of which kinds, the trajectories, the commands and --allow-secrets,
which exports anyway. Secrets and tokens: tests/helpers/secrets.py (SmolLM2's tokenizer)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.export import three_turn_trajectories, write_store
from tests.helpers.secrets import SECRETS, clean_trajectory, secret_trajectory
from trajstore.cli.main import app
from trajstore.export import ExportError, ExportOptions, export_store

FINDINGS = 11 + 2 + 1
"""A secret trajectory's findings (tests/redact/test_trajectory.py lists them): 11 in its spans (3 in
the prompt, 7 in an observation, 1 in a tool call), the api_key and e-mail of its metadata, the
e-mail of its raw reward."""


@pytest.fixture(scope="module")
def tok(smol_tokenizer):
    return smol_tokenizer


@pytest.fixture
def leaky(tmp_path, tok):
    """c1 (clean), s1 (secrets in prompt, observation, tool call, metadata, raw reward), c2 (clean)."""
    return write_store(tmp_path / "leaky", [clean_trajectory(tok, "c1"), secret_trajectory(tok, "s1"),
                                            clean_trajectory(tok, "c2")])


def _no_output(tmp_path, out):
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if ".partial-" in p]  # no staging folder left either


@pytest.mark.parametrize("to", ["hf", "atif", "trl"])
def test_a_secret_refuses_the_export(leaky, tmp_path, to):
    # export wrote the secrets out: it ran no check at all
    out = tmp_path / "out"
    with pytest.raises(ExportError) as e:
        export_store(leaky, to, str(out))
    msg = str(e.value)
    assert msg.startswith(f"refusing to export: traj redact --dry-run finds {FINDINGS} secret(s) (")
    assert "email 3" in msg and "aws_access_key 1" in msg and "github_token 1" in msg
    assert msg.endswith(f") in 1 of the 3 selected trajectories: 's1'. See them with `traj redact {leaky} --dry-run`, "
                        f"remove them with `traj redact {leaky}`, or export anyway with --allow-secrets")
    assert "\n" not in msg and not any(v in msg for v in SECRETS.values())  # one line, never the secret
    _no_output(tmp_path, out)


def test_only_the_selected_trajectories_are_checked(leaky, tmp_path, read_out):
    r = export_store(leaky, "hf", str(tmp_path / "clean"), ExportOptions(where="trajectory_id <> 's1'"))
    assert r.exported == 2
    assert read_out(tmp_path / "clean", ".trajstore/export.json")["secret_check"] == (
        "traj redact --dry-run found nothing in the selected trajectories")


def test_allow_secrets_exports_anyway(leaky, tmp_path, read_out):
    r = export_store(leaky, "hf", str(tmp_path / "hf"), ExportOptions(allow_secrets=True))
    assert r.exported == 3
    assert read_out(tmp_path / "hf", ".trajstore/export.json")["secret_check"] == "not run (--allow-secrets)"
    rows = read_out(tmp_path / "hf", "data/part-00000.parquet")
    meta = dict(zip(rows["trajectory_id"], rows["metadata"]))
    assert json.loads(meta["s1"])["llm_config"]["api_key"] == SECRETS["api_key"]  # written as stored


def test_trajectories_that_cannot_be_scanned_refuse_it_too(tmp_path):
    # the fixtures' tokenizer "tok" cannot be loaded: --dry-run cannot read their spans and exits 1
    store = write_store(tmp_path / "s", three_turn_trajectories())
    with pytest.raises(ExportError) as e:
        export_store(store, "verl", str(tmp_path / "v"))
    msg = str(e.value)
    assert msg.startswith("refusing to export: 2 of the 2 selected trajectories (or their shards) could not be "
                          "scanned for secrets: 't1', 't2' (t1: tokenizer 'tok' cannot be loaded: ")
    assert msg.endswith(f". See them with `traj redact {store} --dry-run`, or export anyway with --allow-secrets")
    _no_output(tmp_path, tmp_path / "v")
    assert export_store(store, "verl", str(tmp_path / "v"), ExportOptions(allow_secrets=True)).exported == 2


def test_cli_refusal_and_allow_secrets(leaky, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", leaky, "--to", "atif", "--output", str(out)])
    assert res.exit_code == 1
    assert res.stderr.startswith(f"error: refusing to export: traj redact --dry-run finds {FINDINGS} secret(s) (")
    assert f"`traj redact {leaky} --dry-run`" in res.stderr and "--allow-secrets" in res.stderr
    _no_output(tmp_path, out)
    check = CliRunner().invoke(app, ["redact", leaky, "--dry-run", "--format", "json"])  # what the error points to
    assert check.exit_code == 1 and len(json.loads(check.stdout)["redact.findings"]) == FINDINGS
    res = CliRunner().invoke(app, ["export", leaky, "--to", "atif", "--output", str(out), "--allow-secrets",
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["exported"] == 3
    assert len(ts.read_trajectories(leaky)) == 3  # the store is not touched either way
