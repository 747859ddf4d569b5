"""Push subscriptions parsed and checked before anything is stored; kept and read back unchanged;
deliveries say which offsets of which partitions they carry; retries back off exponentially, capped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tidelog.gateway.model import InvalidRequest
from tidelog.gateway.push_model import (
    DEFAULT_BATCH_RECORDS,
    SubscriptionSpec,
    backoff_s,
    delivery_body,
    is_subscription_id,
    parse_subscription,
    spec_from_record,
    spec_record,
)
from tidelog.gateway.read_model import Delivered


def subscription(body: Any) -> SubscriptionSpec:
    return parse_subscription(json.dumps(body).encode(), principal="alice", now_ms=1000, own_group="gw",
                              state_topic="state")


def test_a_subscription_takes_defaults_and_a_fresh_id() -> None:
    spec = subscription({"group": "hooks", "topics": ["a", "b", "a"], "endpoint": "https://h.example:8443/in"})
    assert is_subscription_id(spec.id) and spec.id != subscription(
        {"group": "hooks", "topics": ["a"], "endpoint": "http://h/"}).id
    assert (spec.topics, spec.max_batch_records, spec.auto_offset_reset, spec.timeout_ms, spec.retry_backoff_ms,
            spec.retry_backoff_max_ms, spec.principal) == (("a", "b"), DEFAULT_BATCH_RECORDS, "latest", 10_000, 100,
                                                           30_000, "alice")


@pytest.mark.parametrize("body, message", [
    ({"group": "g", "topics": ["a"]}, "endpoint"),
    ({"group": "g", "topics": ["a"], "endpoint": "ftp://h/x"}, "http or https"),
    ({"group": "g", "topics": ["a"], "endpoint": "http:///x"}, "with a host"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h:99999/"}, "not a URL"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h/ x"}, "http or https"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h/" + "x" * 2048}, "at most"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h/", "maxBatchRecords": 0}, "maxBatchRecords"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h/", "timeoutMs": True}, "timeoutMs"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h/", "retryBackoffMs": 500, "retryBackoffMaxMs": 100},
     "retryBackoffMaxMs"),
    ({"group": "gw", "topics": ["a"], "endpoint": "http://h/"}, "ownership group"),
    ({"group": "g", "topics": ["__consumer_offsets"], "endpoint": "http://h/"}, "internal"),
    ({"group": "g", "topics": ["a"], "endpoint": "http://h/", "sessionId": "x"}, "unknown fields"),
    ([], "JSON object"),
])
def test_a_bad_subscription_is_refused_with_a_message_naming_the_field(body: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        subscription(body)


def test_a_stored_subscription_reads_back_equal_and_expands_data_centres_as_a_session() -> None:
    spec = subscription({"group": "g", "topics": ["logs"], "endpoint": "http://h/", "dataCentres": ["dc1", "dc2"],
                         "maxBatchRecords": 7, "autoOffsetReset": "earliest"})
    again = spec_from_record(spec.id.encode(), spec_record(spec))
    assert again == spec
    assert again.session_request(own_group="gw", state_topic="state").topics == ("dc1.logs", "dc2.logs")


def test_a_record_of_another_version_or_key_is_not_read() -> None:
    spec = subscription({"group": "g", "topics": ["logs"], "endpoint": "http://h/"})
    stored = json.loads(spec_record(spec))
    with pytest.raises(ValueError):
        spec_from_record(b"sub-other", spec_record(spec))
    with pytest.raises(ValueError):
        spec_from_record(spec.id.encode(), json.dumps({**stored, "version": 2}).encode())


def test_a_delivery_lists_each_partitions_offsets_and_keeps_the_records_order() -> None:
    spec = subscription({"group": "g", "topics": ["t"], "endpoint": "http://h/"})
    records = [Delivered("t", 1, 5, 0, None, b"a", ()), Delivered("t", 0, 9, 0, b"k", b"b", ()),
               Delivered("t", 1, 6, 0, None, b"\xff", ())]
    body = json.loads(delivery_body(spec, "d1", 2, records))
    assert (body["subscription"], body["group"], body["deliveryId"], body["attempt"]) == (spec.id, "g", "d1", 2)
    assert body["partitions"] == [
        {"topic": "t", "partition": 0, "firstOffset": 9, "lastOffset": 9, "records": 1},
        {"topic": "t", "partition": 1, "firstOffset": 5, "lastOffset": 6, "records": 2}]
    assert [(r["partition"], r["offset"]) for r in body["records"]] == [(1, 5), (0, 9), (1, 6)]
    assert body["records"][2]["valueBase64"] == "/w=="


def test_retries_back_off_doubling_up_to_the_cap() -> None:
    spec = subscription({"group": "g", "topics": ["t"], "endpoint": "http://h/", "retryBackoffMs": 100,
                         "retryBackoffMaxMs": 1000})
    assert [backoff_s(spec, n) for n in (1, 2, 3, 4, 5, 100)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
