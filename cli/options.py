"""The options and arguments every store command shares: :data:`StoreArgument`,
:data:`FormatOption` (``--format table|json|csv``), :data:`StorageOptions`
(``--storage-option key=value``, parsed by :func:`parse_storage_options`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from fsspec.core import split_protocol

from trajstore.cli.display import OutputFormat
from trajstore.cli.errors import InvalidOptionError

STORE_HELP = "store URI: local directory or s3://bucket/prefix"

StoreArgument = Annotated[str, typer.Argument(help=STORE_HELP, show_default=False)]
"""The store every store command takes first."""

FormatOption = Annotated[OutputFormat, typer.Option(
    "--format", help="output format: table (for people), json or csv (for programs)", case_sensitive=False)]
"""``--format table|json|csv``: the output format, the same on every command (default ``table``)."""

StorageOptions = Annotated[list[str], typer.Option(
    "--storage-option", metavar="KEY=VALUE",
    help="fsspec option key=value for remote stores, e.g. endpoint_url=http://... "
    "(repeatable)", show_default=False)]
"""``--storage-option key=value`` (repeatable); parse with :func:`parse_storage_options`."""


def is_local_uri(uri: str) -> bool:
    """True for a local path or ``file://`` URL (no fsspec option applies to it)."""
    return split_protocol(uri)[0] in (None, "file", "local")


def parse_storage_options(items: list[str] | None, store: str | None = None) -> dict[str, Any]:
    """``key=value`` strings to fsspec options; ``true``/``false`` become booleans.

    Args:
        items: the ``--storage-option`` values.
        store: the store they are for. When it is a local path the options are ignored (``{}``)
            with one ``warning:`` line on stderr: they apply only to remote stores, and were
            silently accepted.

    Raises:
        InvalidOptionError: an item has no ``=`` (a ``ValueError``; exit status 2 in a command).
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidOptionError(f"invalid option --storage-option: expected key=value (got {item!r})")
        out[key] = {"true": True, "false": False}.get(value.lower(), value)
    if out and store is not None and is_local_uri(store):
        typer.echo(f"warning: --storage-option applies only to remote stores (s3://...); ignored for the local "
                   f"store {store} ({', '.join(out)})", err=True)
        return {}
    return out
