"""A read session's id names the instance that holds it, so any instance can forward to it."""

from __future__ import annotations

import pytest

from tidelog.gateway.sessions import instance_of, new_session_id


def test_session_id_names_its_instance_and_is_unique() -> None:
    first, second = new_session_id("https://gw-1.example:8443"), new_session_id("https://gw-1.example:8443")
    assert first != second
    assert instance_of(first) == instance_of(second) == "https://gw-1.example:8443"
    assert all(c.isalnum() or c in "-_." for c in first)  # safe in a URL path as is


@pytest.mark.parametrize("session_id", ["0000", ".abc", "!!!.abc", "/w==.abc", "gA.abc"])
def test_an_id_that_names_no_instance_is_not_forwarded(session_id: str) -> None:
    assert instance_of(session_id) is None
