"""Imports every command module so each registers its commands on ``trajstore.cli.main.app``.
Add one import line per module."""
