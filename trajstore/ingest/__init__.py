"""Ingest adapters for agent harness logs."""
