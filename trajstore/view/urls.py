"""The viewer's page addresses, shared by the app and by ``traj stats --view-url`` links.

Kept apart from :mod:`trajstore.view.config` (pydantic) so that an audit that only prints links
does not import the viewer's configuration."""

from __future__ import annotations

from urllib.parse import quote

VIEW_URL_SAFE = ":@-._~"
"""Characters a trajectory id keeps in its page's path (RFC 3986 allows them in a path segment);
every other one is percent-encoded (UTF-8), as DuckDB's ``url_encode`` does."""


def trajectory_path(trajectory_id: str) -> str:
    """``/t/<trajectory_id>``, the path of a trajectory's page (what ``traj stats --view-url`` links)."""
    return f"/t/{quote(trajectory_id, safe=VIEW_URL_SAFE)}"
