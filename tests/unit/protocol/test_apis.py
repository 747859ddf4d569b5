"""The API registry: the ranges of PROTOCOL_NOTES.md, kio classes and flexible thresholds."""

from __future__ import annotations

import pytest

from tidelog.protocol import apis
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.errors import UnknownApiKey


def test_every_accepted_version_has_kio_request_and_response_classes() -> None:
    for key, (low, high) in apis.ACCEPTED.items():
        for version in range(low, high + 1):
            assert apis.request_class(key, version).__version__ == version
            assert apis.response_class(key, version).__api_key__ == key


@pytest.mark.parametrize(
    ("key", "advertised"),
    [
        (ApiKey.PRODUCE, (0, 13)),
        (ApiKey.FETCH, (4, 17)),
        (ApiKey.API_VERSIONS, (0, 4)),
        (ApiKey.METADATA, (4, 13)),
        (ApiKey.JOIN_GROUP, (0, 9)),
        (ApiKey.INIT_PRODUCER_ID, (0, 5)),
        (ApiKey.FIND_COORDINATOR, (0, 6)),
    ],
)
def test_advertised_ranges_keep_what_old_librdkafka_checks(key: ApiKey, advertised: tuple[int, int]) -> None:
    assert apis.advertised_range(key) == advertised


def test_produce_v0_to_v2_is_advertised_but_not_accepted() -> None:
    assert [apis.is_supported(ApiKey.PRODUCE, v) for v in range(5)] == [False, False, False, True, True]


def test_telemetry_is_not_served() -> None:
    assert not apis.is_known(71)
    with pytest.raises(UnknownApiKey):
        apis.api_key(71)


@pytest.mark.parametrize(
    ("key", "first_flexible"),
    [
        (ApiKey.PRODUCE, 9),
        (ApiKey.FETCH, 12),
        (ApiKey.METADATA, 9),
        (ApiKey.API_VERSIONS, 3),
        (ApiKey.JOIN_GROUP, 6),
        (ApiKey.OFFSET_COMMIT, 8),
        (ApiKey.CREATE_TOPICS, 5),
        (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0),
    ],
)
def test_flexible_threshold_matches_kafka(key: ApiKey, first_flexible: int) -> None:
    low, high = apis.accepted_range(key)
    for version in range(low, high + 1):
        assert apis.is_flexible(key, version) is (version >= first_flexible)


def test_unsupported_pair_has_no_class() -> None:
    with pytest.raises(ValueError):
        apis.request_class(ApiKey.PRODUCE, 2)
