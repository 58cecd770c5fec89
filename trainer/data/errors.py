"""The data path's two exceptions: data the trainer refuses (a user-facing error naming the
shard, trajectory and field) and a read of a stream that was already closed."""

from __future__ import annotations

from trajstore.errors import TrajstoreError


class TrainDataError(TrajstoreError):
    """The store holds data the trainer refuses (names the shard, trajectory and field)."""


class StreamClosed(RuntimeError):
    """A :class:`~trajstore.trainer.data.stream.TrajectoryStream` was read after its ``close()``
    (a reader thread still filtering when the run ended); never seen by a user."""
