"""Every export target by its ``--to`` name."""

from __future__ import annotations

from typing import Final, Literal

from trajstore.export import areal, atif, hf, openrlhf, otlp, skyrl, slime, trl, verl
from trajstore.export.target import Target

TargetName = Literal["verl", "slime", "skyrl", "trl", "areal", "openrlhf", "hf", "atif", "otlp"]

TARGETS: Final[dict[str, Target]] = {t.name: t for t in (
    verl.TARGET, slime.TARGET, skyrl.TARGET, trl.TARGET, areal.TARGET, openrlhf.TARGET, hf.TARGET, atif.TARGET, otlp.TARGET)}
"""The targets in ``--to`` order: the trainers, then the Hugging Face folder, ATIF and OpenTelemetry."""
