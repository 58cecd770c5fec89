"""What an export refuses rather than write wrong: a trajectory without the log-probs, reward or
policy versions a target's layout holds, or without any model call, and a selection in which
``traj redact --dry-run`` finds a secret. Each refusal is one line naming the trajectories and the
option that changes the decision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol, get_args

from trajstore.errors import TrajstoreError, one_line
from trajstore.redact import ScanReport

Field = Literal["logprobs", "rewards", "versions"]
"""A per-sample field a layout may hold and the store may lack: engine log-probs, the scalar
reward, policy versions."""

FIELDS: Final[tuple[str, ...]] = get_args(Field)

WITHOUT_OPTION: Final[dict[str, str]] = {f: f"--without {f}" for f in FIELDS}
"""The option that leaves a field out of a whole export (``--without logprobs``, ...)."""

SKIP_OPTION: Final[str] = "--skip-refused"
"""The option that leaves refused trajectories out instead of stopping the export."""

ALLOW_SECRETS_OPTION: Final[str] = "--allow-secrets"
"""The option that exports trajectories in which ``traj redact --dry-run`` finds something."""

SKIP_UNREADABLE_OPTION: Final[str] = "--skip-unreadable"
"""The option that exports a store with unreadable shards without their trajectories (recorded)."""

SHOWN_IDS: Final[int] = 5
"""Trajectory ids a secret refusal names before "and N more"."""

INCLUDE_NOT_TRAINABLE_OPTION: Final[str] = "--include-not-trainable"
"""The option that writes trajectories stored as not trainable into a trainer layout."""

RefusalReason = Literal["no action token", "missing logprobs", "no reward", "unknown policy version"]


class ExportError(TrajstoreError, ValueError):
    """An export cannot be written as asked (a refused trajectory, an option the target does
    not take, an output folder in the way); nothing was written."""


@dataclass(frozen=True)
class Refusal:
    """Why one trajectory cannot go to a target as it is.

    Attributes:
        reason: the kind of refusal (counted per kind with ``--skip-refused``).
        message: one line naming the trajectory, what is missing and the option to use.
    """

    reason: RefusalReason
    message: str


LIFTED_BY_WITHOUT: Final[dict[str, str]] = {"missing logprobs": "logprobs", "no reward": "rewards",
                                           "unknown policy version": "versions"}
"""The refusal reasons ``--without FIELD`` lifts, with the field."""


class Refusable(Protocol):
    """What a refusal is decided on: a :class:`~trajstore.export.samples.Sample`, or the same
    counts read from a stored row's spans (:class:`~trajstore.export.blockers.RowFacts`)."""

    @property
    def num_missing_logprobs(self) -> int: ...
    @property
    def num_action_tokens(self) -> int: ...
    @property
    def reward(self) -> float | None: ...
    @property
    def unknown_version_calls(self) -> int: ...
    @property
    def num_calls(self) -> int: ...


def refusals(trajectory_id: str, sample: Refusable | None, *, target: str, holds: frozenset[str],
             field_names: dict[str, str]) -> list[Refusal]:
    """Every reason `sample` cannot be written to `target` (empty: it can), in the order
    :func:`refusal` names them.

    Args:
        trajectory_id: the stored id (named in the message).
        sample: the trajectory cut for a trainer (or its counts); None when it has no action span.
        holds: the :data:`FIELDS` the export writes (the target's fields less the ``--without`` ones).
        field_names: the target's own name of each field it holds (``rollout_log_probs``), for the message.

    A field the export holds must be known for every action token / call: a made-up 0.0 log-prob,
    reward or version would be trained on as if the engine had reported it.
    """
    tid = repr(trajectory_id)
    skip = f"or leave such trajectories out with {SKIP_OPTION}"
    if sample is None:
        return [Refusal("no action token", f"trajectory {tid}: no action span (no model call), which the {target} "
                                           f"export cannot hold (select others with --where, {skip})")]
    out = []
    if "logprobs" in holds and sample.num_missing_logprobs:
        out.append(Refusal("missing logprobs", (
            f"trajectory {tid}: {sample.num_missing_logprobs} of {sample.num_action_tokens} action tokens have no "
            f"engine log-prob, which {target}'s {field_names['logprobs']} would need (leave the field out with "
            f"{WITHOUT_OPTION['logprobs']}, {skip})")))
    if "rewards" in holds and sample.reward is None:
        out.append(Refusal("no reward", (
            f"trajectory {tid}: no reward, which {target}'s {field_names['rewards']} would need (leave the field out "
            f"with {WITHOUT_OPTION['rewards']}, {skip})")))
    if "versions" in holds and sample.unknown_version_calls:
        out.append(Refusal("unknown policy version", (
            f"trajectory {tid}: {sample.unknown_version_calls} of {sample.num_calls} model calls have no policy "
            f"version, which {target}'s {field_names['versions']} would need (leave the field out with "
            f"{WITHOUT_OPTION['versions']}, {skip})")))
    return out


def refusal(trajectory_id: str, sample: Refusable | None, *, target: str, holds: frozenset[str],
            field_names: dict[str, str]) -> Refusal | None:
    """The first reason `sample` cannot be written to `target` (:func:`refusals`), or None."""
    found = refusals(trajectory_id, sample, target=target, holds=holds, field_names=field_names)
    return found[0] if found else None


def _ids(ids: list[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:SHOWN_IDS])
    return shown + (f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")


def secrets_refusal(scan: ScanReport, *, store: str, selected: int) -> str | None:
    """Why an export of `selected` trajectories of `store` is refused after ``traj redact
    --dry-run``'s scan of them (:func:`trajstore.redact.find_secrets`), or None when it is clean.

    One line: how many secrets of which kinds in which trajectories, the trajectories that could not
    be scanned (a secret may hide in them, so ``--dry-run`` fails on them too) and why, the commands
    that list and remove them, and the option that exports anyway."""
    if scan.clean:
        return None
    parts = []
    if scan.findings:
        ids = list(dict.fromkeys(f.trajectory_id for f in scan.findings))
        kinds = ", ".join(f"{k} {n}" for k, n in scan.by_kind().items())
        parts.append(f"traj redact --dry-run finds {len(scan.findings)} secret(s) ({kinds}) in {len(ids)} of the "
                     f"{selected} selected trajectories: {_ids(ids)}")
    if scan.unscanned:
        ids = list(dict.fromkeys(u.trajectory_id or u.shard or "?" for u in scan.unscanned))
        first = scan.unscanned[0]
        parts.append(f"{len(ids)} of the {selected} selected trajectories (or their shards) could not be scanned for "
                     f"secrets: {_ids(ids)} ({first.trajectory_id or first.shard}: {one_line(first.reason)})")
    remove = f", remove them with `traj redact {store}`" if scan.findings else ""
    return (f"refusing to export: {'; '.join(parts)}. See them with `traj redact {store} --dry-run`{remove}, or export "
            f"anyway with {ALLOW_SECRETS_OPTION}")
