"""bench/gpu_check: without CUDA it stops at once with a clear message; its `--cpu` dry run goes
through the whole check (kernel, FSDP with one process, SAO steps, sharded checkpoint, a bf16
version loaded back with from_pretrained) on a tiny config. The GPU path itself is only run on a
lent device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_without_cuda_it_fails_fast_and_clearly() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    for cmd in ([str(ROOT / "bench/gpu_check.sh")], [sys.executable, str(ROOT / "bench/gpu_check.py")]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert p.returncode == 2, p.stderr
        assert "no CUDA device" in p.stderr and "this check needs a GPU" in p.stderr


def test_cpu_dry_run_goes_through_the_whole_check(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), "--cpu", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["kernel"]["max_abs_diff_logprob"] < 1e-4  # float32: chunked == full logits
    assert r["iterations"] == r["steps"] == 3 and r["tokens_per_s"] > 0 and r["achieved_tflops"] > 0
    assert ".metadata" in r["checkpoint_files"]  # a sharded (DCP) checkpoint
    assert r["published_dtype"] == "torch.bfloat16" and r["published_parameters"] == r["parameters"]
    assert "CPU dry run" in p.stdout
