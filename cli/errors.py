"""How every ``traj`` command fails and exits: the exit statuses (:data:`EXIT_ERROR`,
:data:`EXIT_USAGE`, :data:`EXIT_INTERRUPTED`, :data:`EXIT_REFUSED`), :func:`friendly_errors` (known
errors as one line on stderr), :class:`InvalidOptionError` (bad usage, exit status 2) and the
library's warnings as one ``warning:`` line each (:func:`one_line_warnings`)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import typer

import trajstore
import trajstore.cli
from trajstore.errors import TrajstoreError, TrajstoreWarning, one_line, os_error_line
from trajstore.lifeline import Stopped

EXIT_ERROR = 1
"""Exit status of a command that failed with an error (one line on stderr)."""
EXIT_USAGE = 2
"""Exit status of bad usage: unknown option, bad option value, missing input path (click's own)."""
EXIT_INTERRUPTED = 130
"""Exit status of a command stopped by Ctrl-C (SIGINT), as shells report it (128 + 2)."""
EXIT_REFUSED = 1
"""Exit status of ``traj ingest`` when some records were refused and every other one was stored.

The same value as :data:`EXIT_ERROR`, as the ingest contract fixes it (0 every record stored or
deliberately skipped, 1 any record refused, 2 usage): scripts tell the two apart by stderr, where
each refusal is listed and an error is one ``error:`` line."""

F = TypeVar("F", bound=Callable[..., Any])


def _package_dirs() -> tuple[str, ...]:
    """Folders of trajstore, trajstore.cli and trajstore.trainer (found without importing the trainer)."""
    spec = importlib.util.find_spec("trajstore.trainer")
    trainer = list(spec.submodule_search_locations or []) if spec is not None else []
    return tuple(d.rstrip(os.sep) + os.sep for d in [os.path.dirname(trajstore.__file__ or ""),
                                                      os.path.dirname(trajstore.cli.__file__ or ""), *trainer])


_PACKAGE_DIRS = _package_dirs()


def _is_ours(category: type[Warning], filename: str) -> bool:
    """A warning the library issued on purpose (shown as one line), not a third-party one."""
    return issubclass(category, TrajstoreWarning) or (
        issubclass(category, UserWarning) and filename.startswith(_PACKAGE_DIRS))


@contextlib.contextmanager
def one_line_warnings() -> Any:
    """Within the block, the library's warnings print as ``warning: <one line>`` on stderr, each
    distinct text once; other warnings print as Python prints them."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        original = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: Any = None) -> None:
            if not _is_ours(category, filename):
                original(message, category, filename, lineno, file, line)
                return
            text = one_line(str(message))
            if text not in seen:
                seen.add(text)
                typer.echo(f"warning: {text}", err=True)

        warnings.showwarning = show
        yield


class InvalidOptionError(ValueError):
    """A command-line option has a bad value: one line on stderr, exit status :data:`EXIT_USAGE`
    (bad usage, like click's own checks), not :data:`EXIT_ERROR`."""


def invalid_options(error: Any, renamed: dict[str, str] | None = None) -> InvalidOptionError:
    """One :class:`InvalidOptionError` for a pydantic ``ValidationError`` raised while a command
    built its config from its options: ``invalid option --port: Input should be greater than or
    equal to 0 (got -1); ...``.

    Args:
        error: the ``pydantic.ValidationError``.
        renamed: config fields whose flag is not the derived one. A field's flag is derived as
            ``--`` + its name with ``_`` as ``-`` and a seconds suffix ``_s`` dropped
            (``hold_timeout_s`` -> ``--hold-timeout``).
    """
    def flag(loc: tuple) -> str:
        field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
        if not field:
            return "option"
        return (renamed or {}).get(field) or "--" + field.removesuffix("_s").replace("_", "-")

    def problem(err: dict[str, Any]) -> str:
        msg = one_line(str(err["msg"])).removeprefix("Value error, ")  # a validator's own text
        got = repr(err.get("input"))
        return f"{flag(tuple(err['loc']))}: {msg}" + ("" if got in msg else f" (got {got})")

    return InvalidOptionError("invalid option " + "; ".join(problem(err) for err in error.errors()))


def friendly_errors(fn: F) -> F:
    """Turn known errors into one clear line on stderr and exit status :data:`EXIT_ERROR`
    (click exits :data:`EXIT_USAGE` for bad usage), a SIGTERM/SIGINT that stopped the command
    (:class:`~trajstore.lifeline.Stopped`) into ``stopped: ...`` and exit status 128 + the signal, and the library's warnings into one line
    each (:func:`one_line_warnings`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with one_line_warnings():
                return fn(*args, **kwargs)
        except Stopped as e:  # SIGTERM / SIGINT inside signals_stop: the children are stopped already
            typer.echo(f"stopped: {one_line(e.message)}", err=True)
            raise typer.Exit(e.exit_code) from None
        except InvalidOptionError as e:
            if os.environ.get("TRAJ_TRACEBACK"):
                raise
            typer.echo(f"error: {one_line(str(e))}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        except (TrajstoreError, ValueError) as e:
            if os.environ.get("TRAJ_TRACEBACK"):
                raise
            typer.echo(f"error: {one_line(str(e))}", err=True)
            raise typer.Exit(EXIT_ERROR) from None
        except OSError as e:  # a path the system refused: name it and the reason, not '[Errno 1] ...'
            if os.environ.get("TRAJ_TRACEBACK") or isinstance(e, BrokenPipeError):
                raise  # `traj sql ... | head`: click ends quietly on a closed pipe
            typer.echo(f"error: {one_line(os_error_line(e))}", err=True)
            raise typer.Exit(EXIT_ERROR) from None

    return wrapper  # type: ignore[return-value]
