"""The input formats ``traj ingest`` reads: one module per harness format, and the registry
(:mod:`.registry`) that every other part of the ingest asks.

Adding a format: write its module here, parsing a record into the format-neutral records of
:mod:`trajstore.ingest.records` (helpers: :mod:`.chat` for chat messages, :mod:`.rewards`,
:mod:`.engine_chain` for engine token ids) and declaring one :class:`~.spec.InputFormat`: its
name, help line and ``source``; how its records are recognised and parsed (:class:`~.spec.Records`:
the keys every record holds, the structure that tells it from the other formats' records), or its
events (:class:`~.spec.Events`), or its whole Parquet files (:class:`~.spec.ParquetFiles`); the
files of its harness that hold no trajectory (:class:`~.spec.NoTrajectory`). Then add that
declaration to :data:`.registry.REGISTERED`, where detection order says which of two formats
matching one record wins. Nothing else names a format.
"""
