"""Imports every command module so each registers its commands on ``trajstore.cli.main.app``.
Add one import line per module."""
from trajstore.cli import (
    audit,  # noqa: F401
    bench,  # noqa: F401
    compact,  # noqa: F401
    demo,  # noqa: F401
    export,  # noqa: F401
    gc,  # noqa: F401
    ingest,  # noqa: F401
    proxy,  # noqa: F401
    redact,  # noqa: F401
    runs,  # noqa: F401
    serve,  # noqa: F401
    store,  # noqa: F401
    train,  # noqa: F401
    validate,  # noqa: F401
    view,  # noqa: F401
)
