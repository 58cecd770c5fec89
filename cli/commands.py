"""Every ``traj`` command: the module that defines it and its one-line summary.

The one table both ``traj`` entry points read: :mod:`trajstore.cli.main` (every command module
imported, for tests and the generated command reference) and :mod:`trajstore.cli.launcher` (the
installed ``traj``, which imports a command's module only when that command runs, so ``traj --help``
answers without importing pyarrow, DuckDB or torch). :class:`~trajstore.cli.app.TrajTyper` gives
each top-level command this summary as its ``short_help``, so both list the same lines;
``tests/cli/test_launcher.py`` checks that each module registers exactly the commands listed here.

Imports nothing: it is read on every start.
"""

from __future__ import annotations

from typing import NamedTuple


class CommandEntry(NamedTuple):
    """Where a top-level command lives (a dotted module with a ``commands`` TrajTyper) and what
    ``traj --help`` says of it (one line)."""

    module: str
    summary: str


COMMANDS: dict[str, CommandEntry] = {
    "schema": CommandEntry("trajstore.cli.schema", "The trajectory schema's columns and those of the training records."),
    "info": CommandEntry("trajstore.cli.store", "Shards, trajectories, tokens and duplicates in a store."),
    "show": CommandEntry("trajstore.cli.store", "One trajectory: its columns, flags and transcript span by span."),
    "migrate": CommandEntry("trajstore.cli.store", "Rewrite shards of an older schema version as the current one."),
    "stats": CommandEntry("trajstore.cli.audit", "Audit reports: overview, staleness, clip ratios, lineage, coverage."),
    "sql": CommandEntry("trajstore.cli.audit", "Run one read-only SELECT against the store's DuckDB views."),
    "bench": CommandEntry("trajstore.cli.bench", "Benchmarks that exercise the whole pipeline (learning, throughput)."),
    "compact": CommandEntry("trajstore.cli.compact", "Merge small shards into larger ones, dropping duplicate ids."),
    "demo": CommandEntry("trajstore.cli.demo", "The asynchronous RL loop end to end on SmolLM2-135M, on this machine."),
    "export": CommandEntry("trajstore.cli.export", "Export to verl, slime, SkyRL, TRL, AReaL, OpenRLHF, HF datasets, ATIF or OTLP."),
    "gc": CommandEntry("trajstore.cli.gc", "Delete what the retention rules allow (a dry run unless --delete)."),
    "ingest": CommandEntry("trajstore.cli.ingest", "Ingest agent logs (OpenHands, SWE-agent, ATIF, NeMo Gym, ...) into a store."),
    "proxy": CommandEntry("trajstore.cli.proxy", "Record every model call of an OpenAI-compatible harness as trajectories."),
    "redact": CommandEntry("trajstore.cli.redact", "Scrub secrets and personal data from a store's trajectories."),
    "runs": CommandEntry("trajstore.cli.runs", "Training runs in a store: versions, checkpoints, records, sizes."),
    "serve": CommandEntry("trajstore.cli.serve", "Serve a local model over an OpenAI-compatible API with token log-probs."),
    "train": CommandEntry("trajstore.cli.train", "Train a policy with SAO on a store's trajectories as they arrive."),
    "validate": CommandEntry("trajstore.cli.validate", "Check every row against the schema of its file's version."),
    "view": CommandEntry("trajstore.cli.view", "Browse a store in the browser: episodes, transcripts, tokens."),
}
"""Top-level commands in the order ``traj --help`` lists them."""


OLD_SPELLINGS: dict[str, dict[str, str]] = {
    "train": {"--run-id": "--run"},
    "demo": {"--run-id": "--run", "--store": "STORE"},
    "proxy": {"--follow-run": "--run", "--store": "STORE", "--poll": "--poll-interval"},
    "gc": {"--consumed-by": "--run"},
    "redact": {"--check": "--dry-run", "--no-check": "--no-dry-run"},
    "ingest": {"--store": "STORE", "--output": "--format"},
    "export": {"--out": "--output"},
    "view": {"--token-env": "--client-token-env"},
}
"""Options renamed so that one concept has one spelling on every command: a training run is
``--run``, a preview ``--dry-run``, the output format ``--format``, where the result is written
``--output``, the seconds between checks for something new ``--poll-interval``, the variable
holding the token clients must send ``--client-token-env``, the store the first argument
``STORE``. The old spelling still works, hidden from ``--help``, with one ``warning:`` line naming
the new one (:meth:`trajstore.cli.app.TrajCommand.parse_args`). A new spelling without dashes is
the command's first argument: the old option's value moves in front of the other arguments
(``traj ingest LOGS --store S`` runs as ``traj ingest S LOGS``)."""


def summary_of(name: str | None) -> str | None:
    """The summary line of top-level command ``name``, or None for a name not listed."""
    entry = COMMANDS.get(name or "")
    return entry.summary if entry else None
