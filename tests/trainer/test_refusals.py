"""`traj train` refuses bad options, checkpoints and data before it writes anything, with one
line that names the option or file (issue 14, "Attacked with bad input"), and never publishes
non-finite weights. Each case here corrupted or lost data, or gave a traceback, before."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from trajstore import write_trajectories
from trajstore.cli.main import app
from trajstore.trainer.loop.config import AlgoConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import NonFiniteUpdateError
from trajstore.trainer.loop.train import train
from trajstore.policies import latest_policy_version, list_policy_versions

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import tiny_model_trajectory

BASE = ["--model", "tiny-llama", "--batch-size", "2", "--micro-batch-size", "2", "--max-seq-len", "512",
        "--critic-warmup-steps", "0", "--checkpoint-every", "1"]


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["train", *args], env={"TRAJ_TRACEBACK": ""})


def _one_error(r, *needles: str, code: int = 1) -> str:  # noqa: ANN001
    """The run failed (exit status ``code``) with exactly one `error:` line containing every needle,
    and no traceback."""
    assert r.exit_code == code, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.output
    for n in needles:
        assert n in errors[0], errors[0]
    assert "Traceback" not in r.output
    return errors[0]


def _tree(root: Path) -> dict[str, str]:
    """Digest of every file the trainer writes (records, checkpoints, policies), by path."""
    out = {}
    for sub in ("runs", "policies"):
        for p in sorted((root / sub).rglob("*")) if (root / sub).exists() else []:
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def _nothing_written(root: Path) -> None:
    assert not (root / "runs").exists() and not (root / "policies").exists()


def _cfg(store: Path, run_id: str = "r", **run) -> TrainConfig:
    # vocabulary 256: what the CLI's tiny-llama has (ids of the synthetic data are below 128)
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=256),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id=run_id, checkpoint_every=1, progress=False, **run))


# -- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "flag"), [
    (["--policy-lr", "inf"], "--policy-lr"),  # exited 0 after publishing an all-NaN policy
    (["--critic-lr", "nan"], "--critic-lr"),
    (["--eps-high", "inf"], "--eps-high"),
    (["--idle-timeout", "-1", "--follow"], "--idle-timeout"),
])
def test_non_finite_or_out_of_range_options_are_refused(tmp_path: Path, args: list[str], flag: str) -> None:
    write_synthetic_store(tmp_path, 2)
    _one_error(_run(str(tmp_path), *BASE, "--run-id", "x", *args), f"invalid option {flag}", code=2)  # bad usage
    _nothing_written(tmp_path)


def test_an_update_that_makes_weights_non_finite_stops_and_keeps_the_last_good_version(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 8)
    cfg = _cfg(tmp_path, max_steps=1)
    assert train(cfg).steps == 1  # v0, v1 published and checkpointed
    cfg.run.max_steps = None
    # past validation (as a config edited in memory, or an lr schedule gone wrong, would be)
    cfg.optim.policy_lr = float("inf")
    before = _tree(tmp_path)
    with pytest.raises(NonFiniteUpdateError, match="policy update made parameters non-finite"):
        train(cfg, resume=True)
    assert latest_policy_version(tmp_path, "r") == 1 and list_policy_versions(tmp_path, "r") == [0, 1]
    after = _tree(tmp_path)
    # only the config was rewritten and v1 re-published on resume; no record or checkpoint of the bad step
    assert {k for k in after if k not in before} == set()
    ckpt = json.loads((tmp_path / "runs/r/checkpoints/LATEST").read_text())
    assert ckpt["iteration"] == 1


# -- data ----------------------------------------------------------------------------------------


def test_empty_store_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "trajectories").mkdir()
    _one_error(_run(str(tmp_path), *BASE, "--run-id", "e"), "nothing to train", "0 rows")
    _nothing_written(tmp_path)


def test_nothing_trainable_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"n{i}") for i in range(3)]
    trajs = [t.model_copy(update={"reward": None}) for t in trajs]  # no reward: nothing to learn from
    write_trajectories(str(tmp_path), trajs)
    _one_error(_run(str(tmp_path), *BASE, "--run-id", "n"), "nothing to train", "3 rows: 0 trainable",
               "3 without a reward")
    _nothing_written(tmp_path)


def test_a_where_that_selects_nothing_is_refused(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)
    _one_error(_run(str(tmp_path), *BASE, "--run-id", "w", "--where", "num_actions > 100"),
               "nothing to train", "4 filtered by --where")
    _nothing_written(tmp_path)


def test_a_where_that_fails_on_the_data_is_one_line(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)  # source is 'sdk', which DuckDB cannot cast to an integer
    _one_error(_run(str(tmp_path), *BASE, "--run-id", "w", "--where", "CAST(source AS INTEGER) = 1"),
               "--where", "fails on shard", "Conversion Error")
    _nothing_written(tmp_path)


@pytest.mark.parametrize("token", [256, 263])  # "at or above the vocabulary size": 256 is the first bad id
def test_token_id_outside_the_vocabulary_in_a_later_shard_is_refused_before_any_write(tmp_path: Path,
                                                                                     token: int) -> None:
    write_synthetic_store(tmp_path, 8, per_shard=2)  # 4 good shards first
    rng = np.random.default_rng(1)
    bad = tiny_model_trajectory(rng, trajectory_id="bad")
    tokens = np.array(bad.tokens, dtype=np.int32)
    tokens[-1] = token  # the final action token; the CLI's tiny-llama has a vocabulary of 256
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="ok"),
                                       bad.model_copy(update={"tokens": tokens})])
    err = _one_error(_run(str(tmp_path), *BASE, "--run-id", "v"), "trajectory 'bad'", "row 1",
                     f"id {token} is outside the model's vocabulary of 256")
    assert "field tokens" in err
    _nothing_written(tmp_path)


def test_overlong_error_is_refused_before_any_write(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 6, per_shard=2)
    rng = np.random.default_rng(2)
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="long", num_turns=12,
                                                       action_len=(30, 40))])
    args = [a if a != "512" else "200" for a in BASE]  # --max-seq-len 200
    _one_error(_run(str(tmp_path), *args, "--run-id", "o", "--overlong", "error"), "trajectory 'long'",
               "--max-seq-len 200")
    _nothing_written(tmp_path)


def test_text_only_data_is_refused_before_the_model_is_loaded(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: the refusal took 17 s because the model was loaded first."""
    from trajstore.trainer.loop import setup as loop_setup

    write_synthetic_store(tmp_path, 2, with_logprobs=False)

    def no_load(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(loop_setup, "load_policy", no_load)
    with pytest.raises(Exception, match="no rollout log-probs"):
        setup(_cfg(tmp_path))
    _nothing_written(tmp_path)


def test_old_shards_without_nullable_columns_train(tmp_path: Path) -> None:
    """Shards of an older schema that lack group_id and metadata crashed `traj train`."""
    write_synthetic_store(tmp_path, 4, per_shard=2)
    for shard in sorted((tmp_path / "trajectories").glob("*.parquet"))[:1]:
        t = pq.read_table(shard)
        old = t.drop_columns(["group_id", "metadata"])
        pq.write_table(old.replace_schema_metadata(t.schema.metadata), shard)
    r = _run(str(tmp_path), *BASE, "--run-id", "old", "--format", "json", "--where", "group_id IS NULL")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{"):])["iterations"] == 2


# -- the store -----------------------------------------------------------------------------------


def test_read_only_store_is_one_line(tmp_path: Path) -> None:
    """A read-only store gave a PermissionError traceback. Root ignores file modes, so as root
    the store is bind-mounted read-only in a private mount namespace of the child only."""
    import subprocess

    write_synthetic_store(tmp_path, 2)
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", "train", str(tmp_path), *BASE,
           "--run-id", "ro"]
    if os.geteuid() == 0:
        if not shutil.which("unshare"):
            pytest.skip("root without unshare(1): cannot make the store read-only")
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mount --bind -o ro "$0" "$0" || exit 77; exec "$@"', str(tmp_path), *cmd]
    else:
        for p in [tmp_path, *tmp_path.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if k != "TRAJ_TRACEBACK"})
    finally:
        for q in [tmp_path, *tmp_path.rglob("*")]:
            q.chmod(0o755 if q.is_dir() else 0o644)
    if p.returncode == 77 or "unshare failed" in p.stderr:
        pytest.skip(f"cannot mount read-only here: {p.stderr.strip()[-200:]}")
    assert p.returncode == 1, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("error: cannot train into") and "not writable" in lines[-1], p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "policies").exists()


# -- checkpoints ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with run 'r': 2 policy steps, checkpoints after each, 4 trajectories left over."""
    root = tmp_path_factory.mktemp("trained")
    write_synthetic_store(root, 8, per_shard=2)
    assert train(_cfg(root, max_steps=2)).steps == 2
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst / "s")
    return dst / "s"


def _ckpt(root: Path) -> Path:
    return root / "runs/r/checkpoints" / json.loads((root / "runs/r/checkpoints/LATEST").read_text())["dir"]


class _Foreign:
    pass


def _corrupt(kind: str, root: Path) -> str:
    """Damage the run's checkpoint; return the file the error must name."""
    latest = root / "runs/r/checkpoints/LATEST"
    ck = _ckpt(root)
    if kind == "no-checkpoint":  # records, but the checkpoints are gone
        shutil.rmtree(root / "runs/r/checkpoints")
        return "has training records but no checkpoint"
    if kind == "latest-not-json":
        latest.write_text("{not json")
        return str(latest)
    if kind == "latest-wrong-shape":
        latest.write_text(json.dumps([1, 2]))
        return str(latest)
    if kind == "latest-escapes":
        latest.write_text(json.dumps({"iteration": 2, "dir": "../../.."}))
        return str(latest)
    if kind == "negative-iteration":
        state = json.loads((ck / "state.json").read_text())
        state["iteration"] = -3
        (ck / "state.json").write_text(json.dumps(state))
        return str(ck / "state.json")
    if kind == "policy-garbage":
        (ck / "policy.pt").write_bytes(b"\x00garbage" * 10)
        return str(ck / "policy.pt")
    if kind == "foreign-pickle":
        (ck / "critic.pt").write_bytes(pickle.dumps(_Foreign()))
        return str(ck / "critic.pt")
    if kind == "missing-key":
        sd = torch.load(ck / "policy.pt", weights_only=True)
        sd.pop(sorted(sd)[0])
        torch.save(sd, ck / "policy.pt")
        return str(ck / "policy.pt")
    if kind == "wrong-shape":
        sd = torch.load(ck / "critic.pt", weights_only=True)
        sd["value_head.weight"] = torch.zeros(3, 3)
        torch.save(sd, ck / "critic.pt")
        return str(ck / "critic.pt")
    if kind == "missing-file":
        (ck / "rng.pt").unlink()
        return "has no rng.pt"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["no-checkpoint", "latest-not-json", "latest-wrong-shape", "latest-escapes",
                                  "negative-iteration", "policy-garbage", "foreign-pickle", "missing-key",
                                  "wrong-shape", "missing-file"])
def test_a_bad_checkpoint_is_one_line_naming_the_file_and_nothing_changes(trained: Path, tmp_path: Path,
                                                                          kind: str) -> None:
    root = _copy(trained, tmp_path)
    needle = _corrupt(kind, root)
    before = _tree(root)
    _one_error(_run(str(root), *BASE, "--run-id", "r", "--resume"), needle)
    assert _tree(root) == before  # no record deleted, nothing re-published


# -- feedback ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["train", "STORE", "--model", "tiny-llama", "--run-id", "x"], ["demo"]])
def test_missing_train_extra_is_one_line_naming_the_install_command(tmp_path: Path, command: list[str]) -> None:
    """Without the `train` extra both commands ended in ModuleNotFoundError tracebacks; the CLI
    itself must import without torch."""
    import subprocess

    write_synthetic_store(tmp_path / "s", 2)
    args = [str(tmp_path / "s") if a == "STORE" else a for a in command]
    env = {k: v for k, v in os.environ.items() if k != "TRAJ_TRACEBACK"}
    # torch unimportable as if never installed (sys.modules[name] = None: import fails, find_spec is None)
    hide = "import sys; sys.modules['torch'] = None; from trajstore.cli.main import app; app()"
    p = subprocess.run([sys.executable, "-c", hide, *args,
                        "--store" if command == ["demo"] else "--seed", str(tmp_path / "d") if command == ["demo"]
                        else "0"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: traj {command[0]} needs torch: "), p.stderr
    assert "pip install torch==2.13.0 && pip install 'trajstore[train]'" in lines[0]
    assert not (tmp_path / "s" / "runs").exists()


def test_progress_line_labels_every_figure_once() -> None:
    """Issue 16: the progress line had two unlabelled `mean=` fields (reward and ratio)."""
    from trajstore.trainer.loop.records import progress_line

    line = progress_line(3, 3, {"reward/mean": 0.5, "value/explained_variance": 0.123, "ratio/mean": 1.0021,
                                "perf/tokens_per_s": 1234.4})
    assert line == "step 3 v3 reward=0.5 EV=0.12 ratio=1.002 tok/s=1,234"
    # a warm-up iteration is recorded as step = iteration - budget: iteration 7 at step -2 is the
    # 8th (7 + 1) of a budget of 9 (7 - (-2)) critic-only batches; "warm-up -2" explained nothing
    warm = progress_line(-2, 0, {"value/explained_variance": -0.5, "warn/critic_ev_not_positive": 1.0}, iteration=7)
    assert warm == "critic warm-up 8/9 v0 EV=-0.50 [critic not useful yet: EV<=0]"


def test_resume_with_nothing_new_warns(trained: Path, tmp_path: Path) -> None:
    """Issue 16: training that trains nothing reported "0 iterations" without a warning."""
    root = _copy(trained, tmp_path)
    first = _run(str(root), *BASE, "--run-id", "r", "--resume", "--format", "json")  # the 4 left over
    assert first.exit_code == 0, first.output
    r = _run(str(root), *BASE, "--run-id", "r", "--resume", "--format", "json")
    assert r.exit_code == 0, r.output
    warn = [line for line in r.output.splitlines() if line.startswith("warning: ")]
    assert warn == ["warning: no trajectory was trained in this run (since the checkpoint: 0 rows: 0 trainable)"]
    assert json.loads(r.output[r.output.index("{"):])["warnings"]


def test_fewer_policy_steps_than_asked_warns(tmp_path: Path) -> None:
    """A new user asked for 2 steps on a 3-trajectory store and got "0 policy steps" without a
    word: the critic warm-up had used every batch."""
    write_synthetic_store(tmp_path, 3)
    r = _run(str(tmp_path), "--model", "tiny-llama", "--max-seq-len", "512", "--critic-warmup-steps", "10",
             "--critic-warmup-until", "budget", "--batch-size", "1", "--micro-batch-size", "1", "--max-steps", "2",
             "--run-id", "few")
    assert r.exit_code == 0, r.output
    warn = [line for line in r.output.splitlines() if line.startswith("warning: ")]
    assert warn == ["warning: made 0 of the 2 policy steps asked for (--max-steps): the data ran out after 3 "
                    "iterations in this run, 3 of them critic warm-up (--critic-warmup-steps)"], r.output


def test_vocabulary_check_reads_statistics_only_and_reads_tokens_without_them(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from trajstore import open_store
    from trajstore.trainer import data
    from trajstore.trainer.data import vocabulary

    write_synthetic_store(tmp_path, 4, per_shard=2)
    reads: list[str] = []
    original = vocabulary._read_column
    monkeypatch.setattr(vocabulary, "_read_column", lambda s, sh, c: reads.append(sh.name) or original(s, sh, c))
    stream = data.TrajectoryStream(open_store(str(tmp_path)), DataConfig(max_seq_len=512), tokenizer="tiny-llama",
                                   vocab_size=None)
    census = stream.precheck()
    stream.vocab_size = 128
    stream.check_vocabulary(census)
    assert reads == [] and census.max_token_id is not None and census.max_token_id < 128
    # a shard written without statistics (another writer): its token column is read instead
    first = sorted((tmp_path / "trajectories").glob("*.parquet"))[0]
    t = pq.read_table(first)
    pq.write_table(t, first, write_statistics=False)
    stream = data.TrajectoryStream(open_store(str(tmp_path)), DataConfig(max_seq_len=512), tokenizer="tiny-llama",
                                   vocab_size=100)
    with pytest.raises(data.TrainDataError, match="is outside the model's vocabulary of 100"):
        stream.check_vocabulary(stream.precheck())
    assert reads == [first.name]


def test_overlong_skip_is_said_on_the_console(tmp_path: Path) -> None:
    """Issue 16 walkthrough: with the default --overlong skip, a trajectory longer than
    --max-seq-len was left out with no word on the console (only a data/skipped_overlong metric in
    the run's records): the start says what the data holds, the end warns what was not trained."""
    rng = np.random.default_rng(2)
    write_trajectories(str(tmp_path), [tiny_model_trajectory(rng, trajectory_id="long", num_turns=12,
                                                       action_len=(30, 40))])  # read first
    write_synthetic_store(tmp_path, 4, per_shard=2)
    args = [a if a != "512" else "200" for a in BASE]  # --max-seq-len 200
    r = _run(str(tmp_path), *args, "--run-id", "s", "--max-steps", "2")
    assert r.exit_code == 0, r.output
    assert "data: 5 rows: 4 trainable (1 longer than --max-seq-len)" in r.output
    warns = [line for line in r.output.splitlines() if line.startswith("warning: ") and "--max-seq-len" in line]
    assert warns == ["warning: 1 trajectory longer than --max-seq-len 200 tokens was skipped, not trained "
                     "(raise --max-seq-len to train them; --overlong error stops at the first)"], r.output
