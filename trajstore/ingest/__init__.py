"""`traj ingest`: real agent logs (OpenHands V0/V1, SWE-agent, mini-swe-agent, tau-bench, ATIF,
nebius, SWE-smith, NeMo Gym, verl / SkyRL dumps; JSON, JSONL or Parquet; trajectory Parquet in
trajstore's own schema written elsewhere, checked row by row as ``traj validate`` checks it) into a store.

Parsers (one module per input format, :mod:`~trajstore.ingest.formats`, all listed in its
registry) turn records into format-neutral conversations, engine rollouts or text rollouts
(:mod:`~trajstore.ingest.records`); :mod:`~trajstore.ingest.builders` make trajectories of them
(conversations tokenized with a chat template); :func:`ingest_paths` writes the result. One bad
record costs only itself: it becomes a :class:`Problem` with path, line and reason.
"""

from trajstore.ingest.builders.conversation import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    TRUNCATION_MARKER,
    conversation_to_trajectories,
)
from trajstore.ingest.builders.engine import rollout_to_trajectories
from trajstore.ingest.builders.render import RenderedPart, render_conversation
from trajstore.ingest.formats.registry import FORMATS
from trajstore.ingest.formats.spec import InputFormat
from trajstore.ingest.pipeline import IngestError, IngestInterrupted, ingest_paths, iter_trajectories
from trajstore.ingest.records import Problem
from trajstore.ingest.summary import IngestProgress, IngestReport

__all__ = [
    "DEFAULT_MAX_OBSERVATION_CHARS", "FORMATS", "IngestError", "IngestInterrupted", "IngestProgress", "IngestReport",
    "InputFormat", "Problem",
    "RenderedPart", "TRUNCATION_MARKER", "conversation_to_trajectories", "ingest_paths", "iter_trajectories",
    "render_conversation", "rollout_to_trajectories",
]
