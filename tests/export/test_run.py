"""trajstore/export/run.py: selection (--where, --run, --limit), refusals as one line naming the
trajectory and the option, --skip-refused counts, --without, the output folder appearing whole or
not at all, files of --rows-per-file trajectories, the manifest."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.export import UNCHECKED, refused_trajectories, three_turn_trajectories, write_store
from trajstore.audit import AuditError
from trajstore.export import ExportError, ExportOptions, export_store
from trajstore.export import files as export_files


@pytest.fixture
def mixed(tmp_path):
    """t1, t2, then no-lp, no-reward, no-action (tests/helpers/export.py)."""
    return write_store(tmp_path / "mixed", three_turn_trajectories() + refused_trajectories())


_SKIP = "or leave such trajectories out with --skip-refused"


@pytest.mark.parametrize(("to", "lp", "versions", "rewards"), [
    ("verl", "rollout_log_probs", "min/max_global_steps", "rm_scores"),
])  # AReaL's blockers (its fields are required: only --skip-refused lifts them): test_blockers.py
def test_every_refusal_is_named_at_once_and_nothing_is_written(mixed, tmp_path, to, lp, versions, rewards):
    # before: only the first refused trajectory was named; the next run found the next reason
    out = tmp_path / "out"
    with pytest.raises(ExportError) as e:
        export_store(mixed, to, str(out), UNCHECKED)
    assert str(e.value) == (
        f"cannot export to {to}: 3 blocker(s), all listed (traj export --dry-run shows them); nothing was written: "
        "(1) missing logprobs: 1 trajectory (lifted by --without logprobs or --skip-refused); e.g. trajectory 'no-lp': "
        f"2 of 2 action tokens have no engine log-prob, which {to}'s {lp} would need (leave the field out with "
        f"--without logprobs, {_SKIP}); (2) unknown policy version: 1 trajectory (lifted by --without versions or "
        "--skip-refused); e.g. trajectory 'no-lp': 1 of 1 model calls have no policy version, which "
        f"{to}'s {versions} would need (leave the field out with --without versions, {_SKIP}); (3) no reward: "
        "1 trajectory (lifted by --without rewards or --skip-refused); e.g. trajectory 'no-reward': no reward, which "
        f"{to}'s {rewards} would need (leave the field out with --without rewards, {_SKIP})")
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".partial-" in p]  # staging removed


def test_each_reason_names_its_option(mixed, tmp_path):
    opts = ExportOptions(allow_secrets=True, where="trajectory_id <> 'no-lp'")
    with pytest.raises(ExportError, match=r"^trajectory 'no-reward': no reward, which slime's reward would need "
                                          r"\(leave the field out with --without rewards, "):
        export_store(mixed, "slime", str(tmp_path / "a"), opts)
    opts = ExportOptions(allow_secrets=True, where="trajectory_id = 'no-lp'", without=frozenset({"logprobs"}))
    with pytest.raises(ExportError, match=r"^trajectory 'no-lp': 1 of 1 model calls have no policy version, which "
                                          r"skyrl's global_step_when_scheduled would need \(leave the field out "
                                          r"with --without versions, "):
        export_store(mixed, "skyrl", str(tmp_path / "b"), opts)
    with pytest.raises(ExportError, match=r"^trajectory 'no-action': no action span \(no model call\), which the "
                                          r"trl export cannot hold \(select others with --where, or leave such "
                                          r"trajectories out with --skip-refused\)$"):
        export_store(mixed, "trl", str(tmp_path / "c"), ExportOptions(
            allow_secrets=True, where="trajectory_id = 'no-action'", include_not_trainable=True))


def test_skip_refused_counts_each_reason(mixed, tmp_path, read_out):
    r = export_store(mixed, "verl", str(tmp_path / "v"), ExportOptions(allow_secrets=True, skip_refused=True))
    assert (r.selected, r.exported) == (5, 2)
    assert dict(r.skipped) == {"missing logprobs": 1, "no reward": 1}
    assert dict(r.not_trainable_left_out) == {"no action tokens": 1}  # not trainable: left out before any refusal
    assert read_out(tmp_path / "v", "part-00000.non_tensor.parquet")["trajectory_id"] == ["t1", "t2"]
    assert read_out(tmp_path / "v", ".trajstore/export.json")["trajectories"] == {
        "selected": 5, "exported": 2, "skipped": {"missing logprobs": 1, "no reward": 1}, "unreadable_shards_skipped": [],
        "not_trainable": {"left_out": {"no action tokens": 1}, "included": 0}}


def test_without_takes_what_lacks_the_field(mixed, tmp_path, read_out):
    # openrlhf has no versions
    opts = ExportOptions(allow_secrets=True, without=frozenset({"logprobs", "rewards"}), skip_refused=True)
    r = export_store(mixed, "openrlhf", str(tmp_path / "o"), opts)
    assert r.exported == 4 and not r.skipped and dict(r.not_trainable_left_out) == {"no action tokens": 1}
    t = read_out(tmp_path / "o", "part-00000.safetensors")
    assert set(t) == {"sequences", "attention_mask", "action_mask", "response_length", "total_length"}
    assert read_out(tmp_path / "o", ".trajstore/export.json")["left_out"] == ["logprobs", "rewards"]


def test_bad_options_are_refused_before_any_work(store, tmp_path):
    with pytest.raises(ExportError, match=r"^unknown target 'nemo': choose one of verl, slime, skyrl, trl, areal, "
                                          r"openrlhf, hf, atif, otlp$"):
        export_store(store, "nemo", str(tmp_path / "x"), UNCHECKED)
    with pytest.raises(ExportError, match=r"^invalid --without 'tokens': the fields are logprobs, rewards, versions$"):
        export_store(store, "verl", str(tmp_path / "x"),
                     ExportOptions(allow_secrets=True, without=frozenset({"tokens"})))
    with pytest.raises(AuditError, match=r"invalid --where predicate"):
        export_store(store, "verl", str(tmp_path / "x"), ExportOptions(allow_secrets=True, where="rewardd > 0"))
    with pytest.raises(AuditError, match=r"^run 'nope' not found under "):
        export_store(store, "verl", str(tmp_path / "x"), ExportOptions(allow_secrets=True, run="nope"))
    assert not (tmp_path / "x").exists()


def test_output_folder_is_never_written_into(store, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"exists and is not empty: give a new or empty folder"):
        export_store(store, "trl", str(out), UNCHECKED)
    assert os.listdir(out) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    export_store(store, "trl", str(empty), UNCHECKED)  # an empty folder is taken
    assert sorted(os.listdir(empty)) == [".trajstore", "part-00000.parquet"]


def test_a_failure_while_writing_leaves_nothing(store, tmp_path, monkeypatch):
    def broken(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr("trajstore.export.target.write_safetensors", broken)
    with pytest.raises(OSError, match="disk full"):
        export_store(store, "verl", str(tmp_path / "v"), UNCHECKED)
    assert os.listdir(tmp_path) == ["store"]
    assert export_files.MANIFEST_FILE == os.path.join(".trajstore", "export.json")


def test_selection_and_files(mixed, tmp_path, read_out):
    r = export_store(mixed, "skyrl", str(tmp_path / "a"),
                     ExportOptions(allow_secrets=True, where="reward > 0.6", skip_refused=True))
    assert (r.selected, r.exported) == (2, 1)  # t1 and no-lp (reward 1.0); no-lp has no log-probs
    r = export_store(mixed, "skyrl", str(tmp_path / "b"), ExportOptions(allow_secrets=True, limit=1))
    assert (r.selected, r.exported) == (1, 1) and read_out(tmp_path / "b", "part-00000.parquet")["trajectory_id"] == ["t1"]
    r = export_store(mixed, "skyrl", str(tmp_path / "c"), ExportOptions(allow_secrets=True, rows_per_file=1, limit=2))
    assert r.files == ["part-00000.parquet", "part-00001.parquet"]
    assert read_out(tmp_path / "c", "part-00001.parquet")["trajectory_id"] == ["t2"]
    manifest = read_out(tmp_path / "c", ".trajstore/export.json")
    assert manifest["selection"] == {"where": None, "run": None, "limit": 2}
    assert manifest["files"] == r.files and "convert_prompts_responses_to_batch_tensors" in manifest["load"]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_output_has_the_modes_of_the_umask(store, tmp_path, umask):
    # the staging folder used to come from tempfile.mkdtemp (0o700) and safetensors writes 0o600:
    # the export must look like any folder the user makes (0o777 / 0o666 less the umask)
    old = os.umask(umask)
    try:
        for to in ("verl", "atif"):
            export_store(store, to, str(tmp_path / to), UNCHECKED)
    finally:
        os.umask(old)
    for to in ("verl", "atif"):
        top = tmp_path / to
        dirs = [top] + [p for p in top.rglob("*") if p.is_dir()]
        files = [p for p in top.rglob("*") if p.is_file()]
        assert any(p.suffix == ".safetensors" for p in files) or to == "atif"
        assert {oct(p.stat().st_mode & 0o777) for p in dirs} == {oct(0o777 & ~umask)}, to
        assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o666 & ~umask)}, to


@pytest.mark.parametrize(("to", "opts", "message"), [
    ("hf", ExportOptions(where="reward > 5"),
     "nothing to export: no trajectories match --where 'reward > 5' (of 5 in the store)"),
    ("verl", ExportOptions(where="status = 'failed'", limit=3),
     "nothing to export: no trajectories match --where \"status = 'failed'\" (of 5 in the store)"),
    ("atif", ExportOptions(allow_secrets=True, where="trajectory_id = 'no-action'", skip_refused=True),
     "nothing to export: all 1 selected trajectories were left out (1 no action token; --skip-refused leaves out "
     "what atif cannot take)"),
])
def test_nothing_to_export_is_an_error_and_writes_nothing(mixed, tmp_path, to, opts, message):
    # an export of 0 trajectories used to succeed with an empty folder (and, for hf, a card of zeros)
    out = tmp_path / "out"
    with pytest.raises(ExportError) as e:
        export_store(mixed, to, str(out), opts)
    assert str(e.value) == message
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["mixed"]


def test_an_empty_store_is_nothing_to_export(tmp_path):
    from typer.testing import CliRunner

    from trajstore import StoreWriter
    from trajstore.cli.main import app

    StoreWriter(str(tmp_path / "empty")).close()  # a store with no trajectory shard yet
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", str(tmp_path / "empty"), "--to", "hf", "--output", str(out)])
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith("error: nothing to export: the store ") and "has no trajectories" in res.stderr
    assert not out.exists()


IDS_FILE = {"verl": "part-00000.non_tensor.parquet", "slime": "part-00000.parquet", "skyrl": "part-00000.parquet",
            "trl": "part-00000.parquet", "areal": "part-00000.rows.parquet", "openrlhf": "part-00000.rows.parquet"}
"""The file of each trainer layout that names its rows' trajectories."""


def _exported_ids(read_out, out, to):
    cols = read_out(out, IDS_FILE[to])
    if to == "slime":  # a Sample keeps it in its metadata
        return [json.loads(m)["trajectory_id"] for m in cols["metadata"]]
    return cols["trajectory_id"]

REDACTED = "redacted: an action's context changed"


@pytest.fixture
def with_not_trainable(tmp_path):
    """t1, nt (t1's tokens, stored as not trainable with REDACTED as the reason), t2."""
    t1, t2 = three_turn_trajectories()
    nt = t1.model_copy(update={"trajectory_id": "nt", "not_trainable_reason": REDACTED})
    return write_store(tmp_path / "nt-store", [t1, nt, t2])


@pytest.mark.parametrize("to", sorted(IDS_FILE))
def test_trainer_layouts_leave_out_not_trainable_trajectories(with_not_trainable, tmp_path, to, read_out):
    # nt used to be written into every trainer layout as if it could be trained on
    r = export_store(with_not_trainable, to, str(tmp_path / "a"), UNCHECKED)
    assert (r.selected, r.exported, dict(r.not_trainable_left_out), r.not_trainable_included) == (
        3, 2, {REDACTED: 1}, 0)
    assert _exported_ids(read_out, tmp_path / "a", to) == ["t1", "t2"]
    assert read_out(tmp_path / "a", ".trajstore/export.json")["trajectories"]["not_trainable"] == {
        "left_out": {REDACTED: 1}, "included": 0}
    r = export_store(with_not_trainable, to, str(tmp_path / "b"),
                     ExportOptions(allow_secrets=True, include_not_trainable=True))
    assert (r.exported, dict(r.not_trainable_left_out), r.not_trainable_included) == (3, {}, 1)
    assert _exported_ids(read_out, tmp_path / "b", to) == ["t1", "nt", "t2"]


@pytest.mark.parametrize("to", ["hf", "atif"])
def test_full_fidelity_targets_keep_not_trainable_trajectories(with_not_trainable, tmp_path, to, read_out):
    r = export_store(with_not_trainable, to, str(tmp_path / to), UNCHECKED)
    assert (r.exported, dict(r.not_trainable_left_out), r.not_trainable_included) == (3, {}, 1)
    with pytest.raises(ExportError, match=rf"^invalid --include-not-trainable: --to {to} keeps every trajectory"):
        export_store(with_not_trainable, to, str(tmp_path / "x"),
                     ExportOptions(allow_secrets=True, include_not_trainable=True))
    if to == "hf":
        rows = read_out(tmp_path / "hf", "data/part-00000.parquet")
        assert list(zip(rows["trajectory_id"], rows["trainable"], rows["not_trainable_reason"])) == [
            ("t1", True, None), ("nt", False, REDACTED), ("t2", True, None)]
        card = (tmp_path / "hf" / "README.md").read_text()
        assert ("Trajectories stored as not trainable (`trainable` false, why in `not_trainable_reason`): 1. This "
                "dataset keeps them, flagged") in card


def test_only_not_trainable_selected_is_nothing_to_export(with_not_trainable, tmp_path):
    with pytest.raises(ExportError) as e:
        export_store(with_not_trainable, "verl", str(tmp_path / "v"),
                     ExportOptions(allow_secrets=True, where="NOT trainable"))
    assert str(e.value) == ("nothing to export: all 1 selected trajectories were left out (1 stored as not trainable: "
                            f"1 {REDACTED}; --include-not-trainable writes them)")
    assert not (tmp_path / "v").exists()


# -- unreadable shards (walkthrough: a truncated shard and a junk *.parquet were silently left out,
# the manifest saying "skipped": {}) ---------------------------------------------------------------

@pytest.fixture
def damaged(tmp_path):
    """Three shards: t1+t2, then refused_trajectories() (truncated), then a junk ``*.parquet``."""
    import trajstore as ts

    uri = write_store(tmp_path / "damaged", three_turn_trajectories())
    ts.write_trajectories(uri, refused_trajectories())
    shards = sorted((tmp_path / "damaged" / "trajectories").glob("*.parquet"))
    data = shards[-1].read_bytes()
    shards[-1].write_bytes(data[: len(data) // 2])
    (tmp_path / "damaged" / "trajectories" / "zzz-junk.parquet").write_text("not parquet")
    return uri, shards[-1].name


@pytest.mark.parametrize("to", ["hf", "trl"])
def test_unreadable_shards_refuse_the_export_naming_them(damaged, tmp_path, to):
    uri, truncated = damaged
    with pytest.raises(ExportError) as e:
        export_store(uri, to, str(tmp_path / "o"), UNCHECKED)
    msg = str(e.value)
    assert truncated in msg and "zzz-junk.parquet" in msg and "2 shard(s)" in msg
    assert f"traj validate {uri}" in msg and "--skip-unreadable" in msg and "\n" not in msg
    assert not (tmp_path / "o").exists()


def test_skip_unreadable_records_the_shards_in_the_manifest_and_card(damaged, tmp_path, read_out):
    uri, truncated = damaged
    opts = ExportOptions(allow_secrets=True, skip_unreadable=True)
    r = export_store(uri, "hf", str(tmp_path / "o"), opts)
    assert (r.selected, r.exported) == (2, 2)
    assert sorted(u.rsplit("/", 1)[-1] for u in r.unreadable_skipped) == [truncated, "zzz-junk.parquet"]
    man = read_out(tmp_path / "o", os.path.join(".trajstore", "export.json"))
    skipped = man["trajectories"]["unreadable_shards_skipped"]
    assert [(d["shard"].rsplit("/", 1)[-1], d["rows"]) for d in skipped] == [(truncated, None),
                                                                              ("zzz-junk.parquet", None)]
    card = (tmp_path / "o" / "README.md").read_text()
    assert "--skip-unreadable" in card and truncated in card and "zzz-junk.parquet" in card


def test_undecodable_row_group_refuses_then_skip_counts_its_rows(tmp_path, monkeypatch):
    """A shard whose footer reads but whose data does not decode fails only while rows are read."""
    from trajstore.errors import CorruptShardError

    uri = write_store(tmp_path / "s", three_turn_trajectories())

    def broken(store, ids, *a, strict=False, **kw):
        if strict:
            raise CorruptShardError(store.url("trajectories/bad.parquet"), "cannot decode: boom")
        import warnings

        from trajstore.store.shards import CorruptShardWarning
        err = CorruptShardError(store.url("trajectories/bad.parquet"), "cannot decode")
        warnings.warn(CorruptShardWarning(f"skipping {err}", err.path), stacklevel=2)  # as the readers warn
        return real(store, ids, *a, strict=False, **kw)

    import trajstore.export.run as run_mod
    real = run_mod.read_trajectories_by_id
    monkeypatch.setattr(run_mod, "read_trajectories_by_id", broken)
    with pytest.raises(ExportError, match=r"bad\.parquet \(cannot decode: boom\).*--skip-unreadable"):
        export_store(uri, "trl", str(tmp_path / "o"), UNCHECKED)
    assert not (tmp_path / "o").exists()
    r = export_store(uri, "trl", str(tmp_path / "o"), ExportOptions(allow_secrets=True, skip_unreadable=True))
    assert [u.rsplit("/", 1)[-1] for u in r.unreadable_skipped] == ["bad.parquet"]


@pytest.mark.parametrize("to", ["hf", "atif"])
@pytest.mark.parametrize("field", ["logprobs", "rewards", "versions"])
def test_without_on_a_full_fidelity_target_says_it_keeps_every_field(store, tmp_path, to, field):
    """Walkthrough: `--to hf --without logprobs` said "hf writes no logprobs", though hf keeps them."""
    with pytest.raises(ExportError) as e:
        export_store(store, to, str(tmp_path / "o"), ExportOptions(allow_secrets=True, without=frozenset({field})))
    assert str(e.value) == (f"invalid --without {field}: --without applies only to trainer layouts; {to} keeps "
                            "every field as stored (null where a trajectory lacks it)")
    assert "writes no" not in str(e.value)
    assert not (tmp_path / "o").exists()


def test_a_store_whose_only_shard_is_unreadable_names_it_instead_of_saying_empty(tmp_path):
    """Walkthrough: the only shard truncated, export said "the store has no trajectories"."""
    uri = write_store(tmp_path / "s", three_turn_trajectories())
    (shard,) = (tmp_path / "s" / "trajectories").glob("*.parquet")
    shard.write_bytes(shard.read_bytes()[:200])
    for dry_run in (False, True):
        with pytest.raises(ExportError) as e:
            export_store(uri, "trl", str(tmp_path / "o"), ExportOptions(allow_secrets=True, dry_run=dry_run))
        assert shard.name in str(e.value) and "--skip-unreadable" in str(e.value)
        assert "has no trajectories" not in str(e.value)
    with pytest.raises(ExportError, match="no readable trajectories.*--skip-unreadable.*" + shard.name):
        export_store(uri, "trl", str(tmp_path / "o"), ExportOptions(allow_secrets=True, skip_unreadable=True))
    assert not (tmp_path / "o").exists()


def test_skip_unreadable_leaves_the_shards_out_of_the_secret_scan_and_names_them(damaged, tmp_path):
    """Walkthrough: with --skip-unreadable the export still refused with "could not be scanned for
    secrets: ... skipping corrupt shard", the only way out being --allow-secrets."""
    uri, truncated = damaged
    r = export_store(uri, "trl", str(tmp_path / "o"), ExportOptions(skip_unreadable=True, dry_run=True))
    assert sorted(u.rsplit("/", 1)[-1] for u in r.unreadable_skipped) == [truncated, "zzz-junk.parquet"]
    for b in r.blockers:  # what blocks is about the readable trajectories only
        assert truncated not in b.detail and "zzz-junk" not in b.detail and "corrupt shard" not in b.detail, b
    secrets = [b for b in r.blockers if b.kind == "secrets"]
    assert all(b.count <= r.selected for b in secrets)
    without = export_store(uri, "trl", str(tmp_path / "o"), ExportOptions(dry_run=True))
    assert "unreadable shards" in [b.kind for b in without.blockers]
    # the shards are named by their own blocker, lifted by --skip-unreadable, not as unscanned for secrets
    assert all(truncated not in b.detail for b in without.blockers if b.kind == "secrets")
