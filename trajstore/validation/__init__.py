"""Checking trajectory Parquet files written anywhere (``traj validate``): the schema of each
file's declared version and the SDK's row rules, streamed one row group at a time."""

from trajstore.validation.check import DEFAULT_MAX_LISTED, validate_files
from trajstore.validation.problems import FileProblem, FileSummary, ValidationReport
from trajstore.validation.sources import NoSuchInputError

__all__ = ["DEFAULT_MAX_LISTED", "FileProblem", "FileSummary", "NoSuchInputError", "ValidationReport",
           "validate_files"]
