"""What the core reads from a training run's saved config (``runs/<run_id>/config.json``, the
resolved ``TrainConfig`` that ``traj train`` writes): one reader and the key paths it relies on, so
that a renamed config field fails a test instead of the proxy at run time."""

from __future__ import annotations

import json
from typing import Any

from trajstore.errors import TrajstoreError
from trajstore.store.handle import Store
from trajstore.store.layout import run_config_file

BATCH_SIZE_KEY: tuple[str, ...] = ("data", "batch_size")
"""Where the trainer's trajectories per step sit in the saved config (``TrainConfig.data.batch_size``;
``tests/trainer`` checks the trainer writes it there)."""


class RunConfigError(TrajstoreError):
    """A run's saved config is missing or lacks a value the caller needs."""


def read_run_config(store: Store, run_id: str) -> dict[str, Any]:
    """The saved config of run `run_id` as a dict.

    Raises:
        RunConfigError: no ``runs/<run_id>/config.json`` (the trainer has not started), or not JSON.
    """
    rel = run_config_file(run_id)
    try:
        data = json.loads(store.fs.cat_file(store.path(rel)))
    except FileNotFoundError:
        raise RunConfigError(f"{store.url(rel)} does not exist (the trainer of run {run_id!r} has not "
                             "started yet)") from None
    except ValueError as e:
        raise RunConfigError(f"{store.url(rel)} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise RunConfigError(f"{store.url(rel)} is not a JSON object")
    return data


def run_batch_size(store: Store, run_id: str) -> int:
    """The trainer's trajectories per step for run `run_id`, from its saved config.

    Raises:
        RunConfigError: the config is missing, or has no positive integer at :data:`BATCH_SIZE_KEY`.
    """
    value: Any = read_run_config(store, run_id)
    for key in BATCH_SIZE_KEY:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RunConfigError(f"{store.url(run_config_file(run_id))} has no trajectories-per-step value at "
                             f"{'.'.join(BATCH_SIZE_KEY)} (got {value!r})")
    return value
