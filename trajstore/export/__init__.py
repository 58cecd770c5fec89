"""``traj export``: one store feeds other trainers (verl, slime, SkyRL, TRL, AReaL, OpenRLHF, each in
its own batch layout), the Hugging Face Hub (Parquet + a generated dataset card) and ATIF (token ids
and log-probs kept), with the loss mask explicit and nothing made up: a trajectory lacking what a
layout holds is refused, skipped or the field left out, as asked.

    from trajstore.export import ExportOptions, export_store
    export_store("s3://bucket/store", "verl", "out/verl", ExportOptions(where="reward IS NOT NULL"))

One module per target (its layout functions are pure and return the arrays); ``samples`` cuts a
stored trajectory into aligned arrays, ``refusals`` says what cannot go, ``run`` orchestrates.
"""

from trajstore.export.refusals import FIELDS, ExportError
from trajstore.export.run import DEFAULT_ROWS_PER_FILE, ExportOptions, ExportResult, export_store
from trajstore.export.samples import Sample, sample_from_row
from trajstore.export.targets import TARGETS, TargetName

__all__ = ["DEFAULT_ROWS_PER_FILE", "FIELDS", "TARGETS", "ExportError", "ExportOptions", "ExportResult", "Sample",
           "TargetName", "export_store", "sample_from_row"]
