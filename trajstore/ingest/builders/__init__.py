"""Parsed records -> validated trajectories, by kind: a conversation rendered with the tokenizer's
chat template (:mod:`.conversation`, :mod:`.render`, :mod:`.template`), an engine rollout kept
exactly (:mod:`.engine`), an already-rendered text rollout (:mod:`.text`); :mod:`.stored_fields`
derives the stored ids and fields, :mod:`.trees` links records that name each other. The ingest's
:class:`~trajstore.ingest.builder.IngestBuilder` sends each record to its kind's builder."""
