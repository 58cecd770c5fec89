"""Imports every command module so each registers its commands on ``trajstore.cli.main.app``.
Add one import line per module."""
from trajstore.cli import audit  # noqa: F401
from trajstore.cli import ingest  # noqa: F401
from trajstore.cli import demo  # noqa: F401
from trajstore.cli import train  # noqa: F401
from trajstore.cli import runs  # noqa: F401
from trajstore.cli import bench  # noqa: F401
from trajstore.cli import serve  # noqa: F401
from trajstore.cli import proxy  # noqa: F401
from trajstore.cli import store  # noqa: F401
from trajstore.cli import validate  # noqa: F401
