"""Fixtures of the storage unit tests (helpers live in storage_helpers.py)."""

from storage_helpers import open_log

__all__ = ["open_log"]
