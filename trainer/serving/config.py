"""The options of ``traj serve`` (one typed config; the CLI fills it, the server reads it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trajstore.http.limits import DEFAULT_MAX_REQUEST_MB
from trajstore.hub import SMOLLM2_ALIAS


class ServeConfig(BaseModel):
    """Options of ``traj serve``."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(SMOLLM2_ALIAS, description="'smollm2-135m', a local HF directory, a .gguf file, or "
                                                  "'tiny-llama' / 'tiny-qwen3-moe' (random weights, tests)")
    tokenizer: str | None = Field(None, description="tokenizer (default: the model's; SmolLM2's for tiny models)")
    served_model_name: str | None = Field(None, description="name in /v1/models and responses (default: --model)")
    host: str = Field("127.0.0.1", description="interface to bind (loopback by default)")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 = any free port)")
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:N'")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="parameter dtype: auto = bfloat16 on CUDA, float32 on CPU")
    max_batch_size: int = Field(16, ge=1, description="requests sampled together at most")
    max_tokens_default: int = Field(256, ge=1, description="max_tokens when a request gives none")
    weight_version: str = Field("0", description="weight version reported until the first reload")
    seed: int = Field(0, description="seed of the tiny random models' weights")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's choice)")
    max_request_mb: float = Field(DEFAULT_MAX_REQUEST_MB, gt=0, description="largest accepted request body (MiB)")
    sample_log: str | None = Field(None, description="append every generation (ids, log-probs, versions) "
                                                     "to this JSONL file")
