#!/usr/bin/env bash
# GPU check of `traj train` for a lent device: one command, under 5 minutes on one GPU.
# What it runs and prints: see bench/gpu_check.py (CUDA bf16 path, FSDP with one process, the
# chunked log-prob kernel, SAO steps on a ~0.6B random model; tokens/s, peak GPU memory, MFU).
# Exits 2 at once when there is no CUDA device. Extra arguments go to gpu_check.py
# (e.g. --json out.json, --activation-checkpointing, --peak-tflops N).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
"$PY" - <<'PYEOF' || exit 2
import sys
try:
    import torch
except ImportError as e:
    sys.exit(f"gpu_check: torch is not importable by {sys.executable}: {e}")
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: no CUDA device visible to torch {torch.__version__} ({sys.executable}); "
             "this check needs a GPU (python bench/gpu_check.py --cpu is a dry run on CPU)")
PYEOF
# trajstore.trainer lives in trainer/ (a package-dir mapping): install it in place when the
# interpreter does not import it yet (offline: no dependency is fetched)
if ! "$PY" -c "import trajstore.trainer.loop.train" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . \
    || { echo "gpu_check: cannot install trajstore into $PY offline; its dependencies (transformers, pyarrow, polars, duckdb, pydantic, fsspec, safetensors, rich, typer) must be importable" >&2; exit 2; }
fi
exec timeout 290 "$PY" bench/gpu_check.py "$@"
