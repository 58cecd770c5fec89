"""The input formats ``traj ingest`` reads: one module per harness format, and the registry that
every other part of the ingest asks."""
