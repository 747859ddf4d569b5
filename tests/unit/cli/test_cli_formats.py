"""Console producer input and consumer output formats."""

from __future__ import annotations

import json

import pytest

from tidelog.cli.formats import (
    ConsumedRecord,
    FormatError,
    KcatFormat,
    ProducedRecord,
    parse_header_list,
    parse_json_line,
    parse_raw_line,
    render_json,
    render_raw,
)

RECORD = ConsumedRecord("orders", 2, 41, 1_700_000_000_123, "CreateTime", b"user-7", b"paid",
                        [("trace", b"abc"), ("empty", None)])


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("%s\\n", b"paid\n"),
        ("%t/%p@%o %k=%s\\n", b"orders/2@41 user-7=paid\n"),
        ("%K %S %T", b"6 4 1700000000123"),
        ("[%h]", b"[trace=abc,empty=]"),
        ("100%% %s\\t|", b"100% paid\t|"),
        ("plain", b"plain"),
    ],
)
def test_kcat_format_strings_render_like_kcat(fmt: str, expected: bytes) -> None:
    assert KcatFormat(fmt).render(RECORD) == expected


def test_null_key_and_value_print_empty_with_length_minus_one() -> None:
    record = ConsumedRecord("t", 0, 0, None, None, None, None)
    assert KcatFormat("%k|%K|%s|%S|%T").render(record) == b"|-1||-1|-1"


@pytest.mark.parametrize("fmt", ["%x", "ends with %", "ends with \\"])
def test_bad_format_strings_are_refused(fmt: str) -> None:
    with pytest.raises(FormatError):
        KcatFormat(fmt)


def test_json_output_has_every_field_and_base64_for_binary() -> None:
    record = ConsumedRecord("t", 0, 5, 10, "LogAppendTime", None, b"\xff\x00", [("bin", b"\xfe")])
    assert json.loads(render_json(record)) == {
        "topic": "t", "partition": 0, "offset": 5, "timestamp": 10, "timestamp_type": "LogAppendTime",
        "key": None, "value_b64": "/wA=", "headers": [{"key": "bin", "value_b64": "/g=="}],
    }


@pytest.mark.parametrize(
    "record",
    [
        RECORD,
        ConsumedRecord("t", 0, 0, None, None, None, b"\x00\x01binary", [("h", b"\xff")]),
        ConsumedRecord("t", 0, 0, None, None, b"k", None),
        ConsumedRecord("t", 0, 0, None, None, "ünïcode".encode(), "välue ✓".encode()),
    ],
)
def test_what_consume_json_prints_produce_json_reads_back(record: ConsumedRecord) -> None:
    produced = parse_json_line(render_json(record).decode())
    assert (produced.key, produced.value, produced.headers) == (record.key, record.value, record.headers)


def test_json_input_accepts_objects_numbers_and_header_maps() -> None:
    record = parse_json_line('{"key": 7, "value": {"a": [1, 2]}, "headers": {"h": "v"}, "partition": 3, "timestamp": 99}')
    assert record == ProducedRecord(b'{"a": [1, 2]}', b"7", [("h", b"v")], 3, 99)
    assert parse_json_line('{"value": "x", "headers": [["a", "1"], ["a", "2"]]}').headers == [("a", b"1"), ("a", b"2")]


@pytest.mark.parametrize(
    "line",
    ["not json", "[1, 2]", '{"value_b64": "***"}', '{"partition": "1"}', '{"timestamp": 1.5}', '{"headers": 5}',
     '{"headers": [1]}'],
)
def test_bad_json_input_says_what_is_wrong(line: str) -> None:
    with pytest.raises(FormatError):
        parse_json_line(line)


@pytest.mark.parametrize(
    ("line", "separator", "parse_headers", "expected"),
    [
        ("hello", None, False, ProducedRecord(b"hello")),
        ("k:v:w", ":", False, ProducedRecord(b"v:w", b"k")),
        (":v", ":", False, ProducedRecord(b"v", b"")),
        ("a:1,b:2\tk=v", "=", True, ProducedRecord(b"v", b"k", [("a", b"1"), ("b", b"2")])),
        ("\tvalue", None, True, ProducedRecord(b"value")),
        ("", None, False, ProducedRecord(b"")),
    ],
)
def test_raw_lines_split_into_headers_key_and_value(line: str, separator: str | None, parse_headers: bool,
                                                     expected: ProducedRecord) -> None:
    assert parse_raw_line(line, separator, parse_headers) == expected


def test_raw_lines_without_the_expected_separators_are_refused() -> None:
    with pytest.raises(FormatError, match="key separator"):
        parse_raw_line("no separator here", ":")
    with pytest.raises(FormatError, match="tab"):
        parse_raw_line("a:1 value", None, parse_headers=True)


def test_header_lists_keep_order_duplicates_and_null_values() -> None:
    assert parse_header_list("a:1,a:2,flag") == [("a", b"1"), ("a", b"2"), ("flag", None)]


def test_raw_output_prints_the_value_or_key_and_value() -> None:
    assert render_raw(RECORD) == b"paid\n"
    assert render_raw(RECORD, print_key=True, key_separator=b" => ") == b"user-7 => paid\n"
