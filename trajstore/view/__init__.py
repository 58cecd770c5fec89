"""``traj view``: a local web viewer of a store. The list of trajectories or episodes with filters
and sorts (scalar columns from an in-memory DuckDB index, fast at a million trajectories), each
trajectory's transcript span by span and its tokens coloured by engine log-prob, policy version,
staleness and the per-token annotations a training run recorded (``traj train --record-tokens``).

    from trajstore.view import ViewConfig, run_view
    run_view(ViewConfig(store="./store", port=8200))

The app needs Starlette, uvicorn and Jinja2 (the ``view`` extra); this package imports them only
in :mod:`trajstore.view.app`.
"""

__all__ = ["DEFAULT_VIEW_PORT", "DEFAULT_VIEW_TOKEN_ENV", "ViewConfig", "create_app", "run_view"]


def __getattr__(name: str):
    # PEP 562: the app pulls in Starlette, uvicorn and Jinja2, the config pydantic; a module that
    # only links to pages (trajstore.view.links) imports neither.
    if name in ("create_app", "run_view"):
        from trajstore.view import app  # Starlette, uvicorn and Jinja2 load here, on first use

        return getattr(app, name)
    if name in ("DEFAULT_VIEW_PORT", "DEFAULT_VIEW_TOKEN_ENV", "ViewConfig"):
        from trajstore.view import config

        return getattr(config, name)
    raise AttributeError(name)
