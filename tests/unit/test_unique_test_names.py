"""Test files are imported by basename (rootdir mode, no packages): two with one name break collection."""

from __future__ import annotations

import collections
from pathlib import Path


def test_every_test_file_has_a_unique_basename() -> None:
    tests = Path(__file__).resolve().parents[1]
    names = collections.Counter(path.name for path in tests.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
