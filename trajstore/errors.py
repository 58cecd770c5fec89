"""Errors with enough context (file, row, trajectory, field) to act on."""

from __future__ import annotations

from dataclasses import dataclass


def os_reason(e: OSError) -> str:
    """The reason of an ``OSError`` in words (``Permission denied``), without Python's
    ``[Errno 13] ...: 'path'`` wrapping; the path is for the caller to name."""
    return e.strerror or (str(e.args[-1]) if e.args else type(e).__name__)


def os_error_line(e: OSError) -> str:
    """``<path>: <reason>`` for an ``OSError`` (``/sys/nope: Operation not permitted``), or the
    reason alone when it names no path."""
    paths = [p for p in (e.filename, e.filename2) if p is not None]
    return (" -> ".join(str(p) for p in paths) + ": " if paths else "") + os_reason(e)


class TrajstoreError(Exception):
    """Base class of every error this package raises on purpose."""


class TrajstoreWarning(UserWarning):
    """Base class of every warning this package issues on purpose (the ``traj`` commands print
    each as one ``warning: ...`` line)."""


def one_line(message: str) -> str:
    """`message` on one line: DuckDB and other libraries append a ``LINE 1: ...`` echo of the
    query with a ``^^^`` marker and blank lines; those are dropped and the remaining lines
    joined with spaces."""
    keep = []
    for line in message.splitlines():
        s = line.strip()
        if not s or s.startswith("LINE ") or set(s) <= {"^", "~"}:
            continue
        keep.append(s)
    return " ".join(keep)


@dataclass(frozen=True)
class Violation:
    """One broken rule of one trajectory: which field, and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class TrajectoryValidationError(TrajstoreError, ValueError):
    """A trajectory breaks one or more schema rules; all of them are listed.

    Attributes:
        trajectory_id: the offending trajectory's id (or ``"<missing>"``).
        violations: every broken rule, in the order checked.
    """

    def __init__(self, trajectory_id: str | None, violations: list[Violation]):
        self.trajectory_id = trajectory_id if trajectory_id else "<missing>"
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(
            f"trajectory {self.trajectory_id!r} is invalid ({len(self.violations)} "
            f"problem{'s' if len(self.violations) != 1 else ''}):\n{lines}"
        )


class CorruptShardError(TrajstoreError):
    """A shard in the store cannot be read (truncated, not Parquet, or a foreign schema)."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"corrupt shard {path}: {reason}")


class NewerSchemaError(TrajstoreError):
    """A shard was written by a newer trajstore: its schema version is higher than this package
    reads. A compatibility problem, not damage: the file is never skipped as corrupt (its rows
    would silently go missing); upgrading trajstore reads it.

    Attributes:
        path: the shard (URL or path as the store names it).
        schema_version: the version stamped in its footer.
        supported_version: the newest version this package reads.
    """

    def __init__(self, path: str, schema_version: int, supported_version: int):
        self.path = path
        self.schema_version = schema_version
        self.supported_version = supported_version
        super().__init__(
            f"shard {path} was written by a newer trajstore: schema version {schema_version}, but this "
            f"trajstore reads schema versions up to {supported_version}; upgrade trajstore: pip install -U trajstore")


class AdapterError(TrajstoreError, ValueError):
    """A rollout-engine response cannot be turned into an action span (e.g. text without token ids)."""


class MissingExtraError(TrajstoreError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` that adds
    it (e.g. "--plot needs matplotlib: pip install 'trajstore[plot]'")."""


class StoreError(TrajstoreError):
    """The store cannot be opened or written."""
