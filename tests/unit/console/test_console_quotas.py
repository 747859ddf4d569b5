"""The quotas page's pure parts: entities named by a form, values, tiers and tier rules."""

from __future__ import annotations

import pytest

from tidelog.console.quotas import (
    DEFAULT,
    QuotaEntry,
    entity_text,
    parse_entity,
    parse_value,
    tier_rules,
)


@pytest.mark.parametrize(("fields", "entity"), [
    ({"user": "alice"}, (("user", "alice"),)),
    ({"client-id": "app", "user": "alice"}, (("user", "alice"), ("client-id", "app"))),
    ({"user": DEFAULT, "client-id": " app "}, (("user", None), ("client-id", "app"))),
    ({"ip": "10.0.0.7", "user": ""}, (("ip", "10.0.0.7"),)),
    ({"entity": '[["client-id", null], ["user", "bob"]]'}, (("user", "bob"), ("client-id", None))),
])
def test_a_form_names_an_entity_in_kafkas_order_with_default_as_none(fields: dict[str, str],
                                                                     entity: tuple[tuple[str, str | None], ...]) -> None:
    assert parse_entity(fields) == entity


def test_a_form_without_an_entity_or_with_a_damaged_one_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="name the entity"):
        parse_entity({"user": " ", "client-id": ""})
    with pytest.raises(ValueError, match="damaged"):
        parse_entity({"entity": "[[1"})


def test_an_entry_carries_its_entity_back_through_the_form_unchanged() -> None:
    entry = QuotaEntry((("user", "a\"b"), ("client-id", None)), {"producer_byte_rate": 1024.0})
    assert parse_entity({"entity": entry.key}) == entry.entity
    assert entity_text(entry.entity) == 'user=a"b, client-id=<default>'
    assert entry.name_of("client-id") == DEFAULT and entry.name_of("ip") == ""


def test_tier_values_take_names_or_numbers_and_other_keys_numbers_only() -> None:
    assert parse_value("tidelog.tier", "low") == 2.0
    assert parse_value("tidelog.tier", "High") == 0.0
    assert parse_value("tidelog.tier", "1") == 1.0
    assert parse_value("producer_byte_rate", " 1048576 ") == 1048576.0
    with pytest.raises(ValueError, match="not a number or a tier name"):
        parse_value("tidelog.tier", "urgent")
    with pytest.raises(ValueError, match=r"'low' is not a number$"):
        parse_value("producer_byte_rate", "low")


def test_an_entity_shows_its_own_tier_by_name_and_nothing_when_it_sets_none() -> None:
    assert QuotaEntry((("user", "batch"),), {"tidelog.tier": 2.0}).tier == "low"
    assert QuotaEntry((("user", "x"),), {"tidelog.tier": 0.0}).tier == "high"
    assert QuotaEntry((("user", "x"),), {"producer_byte_rate": 1.0}).tier == ""


def test_tier_rules_read_throttled_paused_and_free_from_broker_settings() -> None:
    rules = tier_rules({"quota.tier.medium.byte.rate": "0", "quota.tier.medium.paused": "false",
                        "quota.tier.low.byte.rate": "1048576", "quota.tier.low.paused": "false"})
    assert rules == [{"tier": "medium", "rate": "0", "state": "free"},
                     {"tier": "low", "rate": "1048576", "state": "throttled"}]
    paused = tier_rules({"quota.tier.low.byte.rate": "1048576", "quota.tier.low.paused": "true"})
    assert paused[1]["state"] == "paused" and paused[0]["state"] == "free"


def test_the_wire_names_every_unreachable_bootstrap_server_and_refuses_bad_settings() -> None:
    from kio.schema.describe_client_quotas.v0.request import DescribeClientQuotasRequest

    from tidelog.console.kafka import KafkaFailure
    from tidelog.console.wire import Wire

    closed = [free_port(), free_port()]
    wire = Wire({"bootstrap.servers": f"127.0.0.1:{closed[0]}, PLAINTEXT://127.0.0.1:{closed[1]}"}, 2.0)
    with pytest.raises(KafkaFailure) as refused:
        wire.call(DescribeClientQuotasRequest(components=(), strict=False))
    assert refused.value.code == "NETWORK_EXCEPTION"
    assert f"127.0.0.1:{closed[0]}: " in refused.value.message and f"127.0.0.1:{closed[1]}: " in refused.value.message
    with pytest.raises(KafkaFailure, match="INVALID_CONFIG: bootstrap server 'broker' is not HOST:PORT"):
        Wire({"bootstrap.servers": "broker"}, 1.0)
    with pytest.raises(KafkaFailure, match="UNSUPPORTED_SASL_MECHANISM"):
        Wire({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, 1.0)


def test_an_answer_that_does_not_decode_is_reported_as_a_broker_without_the_request() -> None:
    import socket
    import struct
    import threading

    from kio.schema.describe_client_quotas.v0.request import DescribeClientQuotasRequest

    from tidelog.console.kafka import KafkaFailure
    from tidelog.console.wire import Wire

    listener = socket.create_server(("127.0.0.1", 0))

    def answer_short() -> None:  # the correlation id, then two bytes where a whole response belongs
        conn, _ = listener.accept()
        with conn:
            (size,) = struct.unpack(">i", conn.recv(4))
            conn.recv(size)
            conn.sendall(struct.pack(">ii", 6, 1) + b"\0\0")

    thread = threading.Thread(target=answer_short, daemon=True)
    thread.start()
    wire = Wire({"bootstrap.servers": f"127.0.0.1:{listener.getsockname()[1]}"}, 2.0)
    with pytest.raises(KafkaFailure, match="UNSUPPORTED_VERSION: the answer to DescribeClientQuotasRequest v0 "
                                           "does not decode"):
        wire.call(DescribeClientQuotasRequest(components=(), strict=False))
    thread.join(5)
    listener.close()


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
