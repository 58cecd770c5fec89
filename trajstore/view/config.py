"""The typed configuration of ``traj view`` (the CLI's options)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_VIEW_PORT = 8200
DEFAULT_VIEW_TOKEN_ENV = "TRAJ_VIEW_TOKEN"
"""Environment variable holding the token a browser must present (unset: no token asked)."""


class ViewConfig(BaseModel):
    """Everything ``traj view`` needs. `store` is a local path or an fsspec URI."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    store: str = Field(description="store URI (local path or s3://bucket/prefix)")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options (endpoint, keys)")
    host: str = Field("127.0.0.1", description="interface to bind (loopback by default)")
    port: int = Field(DEFAULT_VIEW_PORT, ge=0, le=65535, description="TCP port (0 = any free port)")
    token: str | None = Field(None, description="token a client must present (Authorization: Bearer, or once "
                                                "as ?token= in a browser, kept in a cookie); None = none asked")
    run: str | None = Field(None, description="training run whose staleness and per-token annotations are shown "
                                              "by default (None: the newest run that consumed the trajectory)")
    where: str | None = Field(None, description="SQL predicate over the trajectories view applied to every "
                                                "listing, as `traj stats --where`")
    tokenizer: str | None = Field(None, description="tokenizer to decode with instead of each trajectory's own "
                                                    "(an alias, a .gguf file or a local Hugging Face folder)")
    page_size: int = Field(50, ge=1, le=1000, description="rows per list page")
