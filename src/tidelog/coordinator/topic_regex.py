"""Topic regular expressions of KIP-848 subscriptions (``SubscribedTopicRegex``).

Kafka compiles them with RE2/J and a topic is subscribed when the whole name matches. tidelog uses
RE2 itself (google-re2): the same syntax, and matching in time linear in the name, so a pathological
expression sent by a client cannot stall the coordinator the way a backtracking engine could.
Every topic is a candidate, internal ones included, as in Kafka's resolution.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Protocol, cast

import re2

__all__ = ["InvalidTopicRegex", "TopicPattern", "compile_topic_regex", "topics_matching"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad expression is the client's error, answered to it: not logged to stderr


class TopicPattern(Protocol):
    def fullmatch(self, text: str) -> object | None: ...


class InvalidTopicRegex(ValueError):
    """The expression does not compile (answered as INVALID_REGULAR_EXPRESSION)."""


@functools.lru_cache(maxsize=1024)
def compile_topic_regex(expression: str) -> TopicPattern:
    """The compiled expression (cached: every heartbeat of every member resolves its regex)."""
    try:
        return cast(TopicPattern, re2.compile(expression, _OPTIONS))
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidTopicRegex(f"SubscribedTopicRegex `{expression}` is not a valid regular expression: {detail}.") from None


def topics_matching(expression: str, topics: Iterable[str]) -> frozenset[str]:
    """The names in ``topics`` that ``expression`` matches whole."""
    pattern = compile_topic_regex(expression)
    return frozenset(name for name in topics if pattern.fullmatch(name) is not None)
