"""What every export target declares (:class:`Target`), what its writer is handed for one part
of the output (:class:`Part`), and how the trainer layouts write a part's files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import duckdb
import numpy as np
import pyarrow as pa

from trajstore.export.files import part_name, write_parquet, write_safetensors
from trajstore.export.samples import Sample


@dataclass(frozen=True)
class Part:
    """One part of an export, handed to a target's writer.

    Attributes:
        out_dir: the (staging) output folder to write into.
        index: 0-based part number (file names carry it: ``part-00003...``).
        offset: how many trajectories the parts before this one exported (the export-wide
            index of this part's first sample).
        rows: the stored rows of the part (schema columns, ``tokens``/log-probs as Arrow), in
            arrival order, refused ones already left out.
        samples: the same trajectories cut for a trainer (:class:`Sample`), in the same order;
            empty for targets that take rows as stored (``uses_samples = False``).
        holds: the fields (:data:`~trajstore.export.refusals.FIELDS`) this export writes.
        pad_token_id: the id written in padded token positions (their masks are 0).
        groups: export-wide group numbers by stored ``group_id`` (shared by every part of one
            export, filled in order of first appearance by the targets that number groups).
    """

    out_dir: str
    index: int
    offset: int
    rows: pa.Table
    samples: list[Sample]
    holds: frozenset[str]
    pad_token_id: int
    groups: dict[str, int] = field(default_factory=dict)


TAIL_DROPPED: Final[str] = "trailing observation tokens dropped"
"""Approximation: tokens after the last model call are in no array (they conditioned nothing generated)."""
MIXED_AS_OLDEST: Final[str] = "model calls of several versions given their oldest"
"""Approximation: a call whose tokens came from several policy versions, with no known boundary, is
written with its oldest version on every token (or as its one version)."""


@dataclass(frozen=True)
class Finish:
    """What a target's closing step (the Hugging Face card) is handed once every part is written.

    Attributes:
        out_dir: the (staging) output folder.
        conn: an audit connection on the store (:func:`trajstore.audit.connect`).
        where: a predicate over the ``trajectories`` view selecting exactly the exported trajectories.
        reproduce: the ``traj stats`` command printing the same numbers, when one can (else None).
        selection: how the trajectories were chosen, in words.
        name: the dataset's name (None: named after its sources).
        license: a licence id given by the user (None = to fill).
    """

    out_dir: str
    conn: duckdb.DuckDBPyConnection
    where: str | None
    reproduce: str | None
    selection: str
    name: str | None
    license: str | None


@dataclass(frozen=True)
class Target:
    """An export target.

    Attributes:
        name: the ``--to`` value.
        description: one line for ``--help`` and the manifest.
        fields: the target's own name of each field its layout holds (``{"logprobs":
            "rollout_log_probs", ...}``); a field missing here is never written.
        required: fields that cannot be left out (the target's trainer reads them
            unconditionally); ``--without <field>`` is refused for them.
        alignment: how the arrays line up with the tokens, in words (manifest and README).
        checked_against: the framework source file(s) and version the layout was read from.
        uses_samples: the writer takes :class:`Sample` s (trajectories without an action span
            are refused); False: the stored rows as they are.
        trainer_layout: a trainer's batch layout (what a trainer steps on): trajectories stored as
            not trainable (``trainable = false``) are left out, counted per reason, unless the
            export includes them; False: a full-fidelity copy (``hf``, ``atif``) that keeps every
            row with its ``trainable`` flag and reason.
        write: writes one part; returns the paths it wrote, relative to ``out_dir``.
        loader: how to read the export back in the target, shown in the manifest (code).
        finish: writes what needs the whole export (the Hugging Face card); None = nothing.
        approximates: what the layout can only approximate (:data:`TAIL_DROPPED`,
            :data:`MIXED_AS_OLDEST`), counted in the manifest.
    """

    name: str
    description: str
    fields: Mapping[str, str]
    required: frozenset[str]
    alignment: str
    checked_against: str
    uses_samples: bool
    write: Callable[[Part], list[str]]
    trainer_layout: bool = False
    loader: str = ""
    finish: Callable[[Finish], list[str]] | None = None
    approximates: frozenset[str] = frozenset()


def trainer_target(*, name: str, description: str, fields: Mapping[str, str], alignment: str,
                   checked_against: str, write: Callable[[Part], list[str]], loader: str,
                   required: frozenset[str] = frozenset(),
                   approximates: frozenset[str] = frozenset({TAIL_DROPPED})) -> Target:
    """A trainer's batch layout (``uses_samples`` and ``trainer_layout`` set): what verl, slime,
    SkyRL, TRL, AReaL and OpenRLHF declare; by default nothing is required and only the trailing
    observation tokens are approximated (:data:`TAIL_DROPPED`)."""
    return Target(name=name, description=description, fields=fields, required=required, alignment=alignment,
                  checked_against=checked_against, uses_samples=True, trainer_layout=True, write=write,
                  loader=loader, approximates=approximates)


def write_table_part(part: Part, table: pa.Table) -> list[str]:
    """Write `table` as the part's one Parquet file (``part-NNNNN.parquet``); return its name in a list."""
    return [write_parquet(part.out_dir, part_name(part.index, ".parquet"), table)]


def write_tensor_part(part: Part, target: str, tensors: Mapping[str, np.ndarray], table_suffix: str,
                      table: pa.Table) -> list[str]:
    """Write the part's tensors (``part-NNNNN.safetensors``, metadata ``trajstore.target`` = `target`)
    and its per-row table (``part-NNNNN<table_suffix>``, Parquet); return both names."""
    return [write_safetensors(part.out_dir, part_name(part.index, ".safetensors"), tensors,
                              {"trajstore.target": target}),
            write_parquet(part.out_dir, part_name(part.index, table_suffix), table)]
