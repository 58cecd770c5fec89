"""Helpers shared by the test suite, imported as ``tests.helpers.<module>``.

pyproject.toml's ``[tool.pytest.ini_options] pythonpath = ["."]`` puts the repository root on
``sys.path``, so ``import tests.helpers.trajectories`` works under ``python -m pytest`` and plain
``pytest``, from the root or any other directory; no test edits ``sys.path``.

Modules:
    trajectories  trajectory factories: :func:`random_trajectory` (random schema-v1 layouts, the
                  ``make_trajectory`` fixture) and :func:`tiny_model_trajectory` (multi-turn, token
                  ids below :data:`VOCAB` for the tiny random models of the trainer tests).
    stores        stores with known contents: :func:`write_synthetic_store` (trainer tests) and
                  :func:`build_known_store` (the hand-described store of the audit tests).
    training      small ``traj train`` configs (:func:`disk_config`, :func:`refusal_config`) and checks
                  of what a run wrote.
    cli           the CLI tests' terminal width and :func:`nonblank_lines`.
    ingest        ingest test pieces (ChatML, harness rows such as :func:`nemo_row`).
    plain_shards  trajectory Parquet rows built with plain pyarrow (validation and ingest tests).
    paths         the repository root and the shared fixtures.

Fixtures over these helpers live in ``tests/conftest.py``.
"""
