import uuid

import pytest
from confluent_kafka import Uuid

from tidelog.cli.topics import _topic_id
from tidelog.common.ids import kafka_uuid_string, parse_kafka_uuid

# 0xfbef... has base64 digits 62 and 63, which Kafka writes as "-" and "_" (standard base64: "+" and "/")
MOST, LEAST = -289360691352306692, -1
RAW = (MOST & (2**64 - 1)).to_bytes(8, "big") + (LEAST & (2**64 - 1)).to_bytes(8, "big")


def test_uuids_are_written_as_kafka_writes_them() -> None:
    expected = "-_v7-_v7-_z__________w"
    assert kafka_uuid_string(uuid.UUID(bytes=RAW)) == expected
    assert kafka_uuid_string(RAW) == expected
    assert kafka_uuid_string((MOST, LEAST)) == expected
    assert kafka_uuid_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_the_cli_shows_librdkafka_topic_ids_in_kafkas_form() -> None:
    assert str(Uuid(MOST, LEAST)) == "+/v7+/v7+/z//////////w"  # librdkafka's own form
    assert _topic_id(Uuid(MOST, LEAST)) == "-_v7-_v7-_z__________w"


def test_kafka_uuid_strings_parse_back_and_other_forms_are_refused() -> None:
    assert parse_kafka_uuid("-_v7-_v7-_z__________w").bytes == RAW
    for bad in ("+/v7+/v7+/z//////////w", "-_v7-_v7-_z__________w==", "short", str(uuid.UUID(bytes=RAW))):
        with pytest.raises(ValueError, match="not a Kafka Uuid"):
            parse_kafka_uuid(bad)
