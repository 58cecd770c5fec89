"""The ``traj`` command: thin wrappers that parse options, call one library function and render.

This module only assembles: it adds each command module's ``commands`` to :data:`app`, the
``traj`` entry point. Conventions every command follows (``tests/cli/test_conventions.py`` checks
them on every registered command, so new commands inherit them by using the pieces of
:mod:`~trajstore.cli.app`, :mod:`~trajstore.cli.errors` and :mod:`~trajstore.cli.options`):

- **Register** each command on its module's ``commands``, a :class:`~trajstore.cli.app.TrajTyper`
  (a group of subcommands: a named sub-app added to it, as ``traj bench``), and add the module
  to :data:`trajstore.cli.commands.COMMANDS` (its module and one-line summary): usage lines then read ``traj stats [OPTIONS] STORE`` and
  ``traj ingest [OPTIONS] STORE PATH...`` (argument metavars are the upper-cased parameter names) and
  flags show no ``<bool>`` value. Help texts (docstrings) may wrap in the source:
  :func:`~trajstore.cli.app.unwrap_help` joins each paragraph's lines.
- **Boolean switches** are declared as pairs, ``typer.Option(False, "--follow/--no-follow")``:
  ``--follow`` and ``--no-follow`` work; there is no ``--follow yes``. Flags that only pick
  what to show (``traj stats --staleness``) stay single flags.
- **Output**: ``--format table|json|csv`` selects the OUTPUT format on every command
  (:data:`~trajstore.cli.options.FormatOption`; ``table`` for people, the default; ``json``/``csv`` for programs).
  Input formats have their own option names (``traj ingest --input-format``).
- **Rendering** goes through :mod:`trajstore.cli.display`: :func:`~trajstore.cli.display.render_tables`
  for tables (key columns first and in every part of a wide table, constant columns in the
  title, empty tables as one line, layout from the terminal width),
  :func:`~trajstore.cli.display.render_record` for one summary object, and
  :func:`~trajstore.cli.display.print_command` for a command the user should copy (own line,
  unstyled, never wrapped). Numbers use :mod:`trajstore.cli.cells`' formats (shares ``0.250``).
- **Typed configs are the options**: a command whose library call takes a pydantic config
  declares no option of its own for it; :mod:`trajstore.cli.config_options` generates one flag
  per field (help, default and choices from the model), as ``traj train`` does.
- **Stores** are the first argument (:data:`~trajstore.cli.options.StoreArgument`), remote ones
  take ``--storage-option key=value`` (:data:`~trajstore.cli.options.StorageOptions`,
  :func:`~trajstore.cli.options.parse_storage_options`); read-only commands open them with
  :func:`trajstore.store.open_existing_store` (nothing there, or not a store: an error).
- **One spelling per concept**: the store ``STORE``, a training run ``--run``, a preview
  ``--dry-run``, the output format ``--format``, where the result is written ``--output``. A renamed option's old spelling goes in
  :data:`trajstore.cli.commands.OLD_SPELLINGS`: it keeps working, hidden, with a ``warning:`` line.
- **Errors**: :func:`~trajstore.cli.errors.friendly_errors` turns known errors into one line on stderr
  (``TRAJ_TRACEBACK=1`` shows the traceback). A missing optional dependency is a
  :class:`~trajstore.errors.MissingExtraError` naming the ``pip install``.
- **Exit status**, the same on every command (README "Exit status";
  :mod:`trajstore.cli.errors`): 0 done; 1 (``EXIT_ERROR``) an error, one line on stderr (no store or not a store at the path, an
  invalid ``--where``, a failed query, a refused checkpoint, an uncaught exception), and also
  (``EXIT_REFUSED``, the same value, as the ingest contract fixes it) ``traj ingest`` stored every
  record it could but refused some, each refusal listed; 2 (``EXIT_USAGE``) bad usage
  (unknown option, bad option value, missing input path), one ``error:`` line too, click's own
  usage errors included (:class:`~trajstore.cli.app.TrajGroup`); 130 (``EXIT_INTERRUPTED``) stopped by Ctrl-C
  (``traj ingest`` says on one line how many trajectories it stored before, each whole); 143
  ``traj train`` stopped at once by a second SIGTERM / Ctrl-C (the first finishes the step,
  checkpoints and exits 0).
- **Warnings** of the library (:class:`~trajstore.errors.TrajstoreWarning`, e.g. a corrupt shard
  skipped) print as one ``warning: ...`` line on stderr each, never as Python's
  ``file:line: Category`` text.
- **Progress and notes** go to stderr, results to stdout.
"""

from __future__ import annotations

import importlib

from trajstore.cli.app import TrajTyper, add_root_options
from trajstore.cli.commands import COMMANDS

COMMAND_MODULES = tuple(importlib.import_module(m) for m in dict.fromkeys(e.module for e in COMMANDS.values()))
"""The modules whose ``commands`` make up ``traj``, in the order ``traj --help`` lists them."""

app = TrajTyper(
    name="traj",
    help="trajstore: trajectory data platform and SAO trainer for asynchronous agentic RL.",
    no_args_is_help=True,
)
add_root_options(app)
for _module in COMMAND_MODULES:
    app.add_typer(_module.commands)
