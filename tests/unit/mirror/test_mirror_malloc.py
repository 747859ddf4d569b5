"""The mirror's C-heap settings (mirror/memory.py): set on glibc, an operator's environment left alone."""

from __future__ import annotations

import platform

import pytest

from tidelog.mirror import memory

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def test_arenas_and_mmap_threshold_are_set_when_the_environment_does_not_set_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert memory.tune() == {"MALLOC_ARENA_MAX": memory.ARENA_MAX, "MALLOC_MMAP_THRESHOLD_": memory.MMAP_THRESHOLD}
    memory.trim()


def test_an_operators_malloc_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert memory.tune() == {"MALLOC_MMAP_THRESHOLD_": memory.MMAP_THRESHOLD}
