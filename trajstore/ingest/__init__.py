"""`traj ingest`: real agent logs (OpenHands V0/V1, SWE-agent, nebius, NeMo Gym) into a store.

Parsers (one module per harness) turn files into format-neutral conversations or engine
rollouts (:mod:`~trajstore.ingest.core`); :mod:`~trajstore.ingest.render` tokenizes
conversations with a chat template; :func:`ingest_paths` writes the result.
"""

from trajstore.ingest.core import DEFAULT_MAX_OBSERVATION_CHARS, TRUNCATION_MARKER, Problem
from trajstore.ingest.detect import FORMATS, InputFormat
from trajstore.ingest.pipeline import (
    IngestError,
    IngestReport,
    ingest_paths,
    iter_trajectories,
)
from trajstore.ingest.render import (
    RenderedPart,
    conversation_to_trajectories,
    render_conversation,
    rollout_to_trajectories,
)

__all__ = [
    "DEFAULT_MAX_OBSERVATION_CHARS", "FORMATS", "IngestError", "IngestReport", "InputFormat", "Problem",
    "RenderedPart", "TRUNCATION_MARKER", "conversation_to_trajectories", "ingest_paths", "iter_trajectories",
    "render_conversation", "rollout_to_trajectories",
]
