"""Source batches made ready for an offset-preserving write (mirror/batches.py), and the mode's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.cli_runner import run_cli
from helpers.mirror_run import write_config
from tidelog.common.errors import ConfigError
from tidelog.mirror.batches import ready
from tidelog.mirror.config import parse_config
from tidelog.mirror.topics import TopicState, plan
from tidelog.protocol.records import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)

NOW = 1_700_000_000_000


def batch(offsets: list[int], *, pid: int = -1, seq: int = -1, transactional: bool = False) -> bytes:
    return build_batch([Record(o, NOW + o, b"k%d" % o, b"v%d" % o) for o in offsets], base_offset=offsets[0],
                       producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                       transactional=transactional)


def test_whole_batches_from_the_position_are_kept_byte_for_byte_with_control_batches() -> None:
    data = batch([0, 1, 2]) + batch([3, 4], pid=9, seq=0, transactional=True)
    marker = build_control_batch(ControlType.ABORT, 9, 0, 0, NOW, base_offset=5)
    got = ready(data + marker, 3)
    assert got.records == batch([3, 4], pid=9, seq=0, transactional=True) + marker
    assert (got.batches, got.record_count, got.next_fetch, got.trimmed) == (2, 3, 6, 0)


def test_a_batch_cut_by_the_fetch_limit_waits_for_the_next_fetch() -> None:
    whole, cut = batch([10, 11]), batch([12, 13])
    got = ready(whole + cut[:-5], 10)
    assert (got.records, got.next_fetch) == (whole, 12)
    assert ready(b"", 7) == ready(None, 7) == (b"", 0, 0, 7, 0)


def test_a_batch_straddling_the_position_is_rebuilt_from_it_and_keeps_its_offsets() -> None:
    compacted = batch([20, 22, 25, 27], pid=4, seq=100)  # a source batch the cleaner rewrote
    got = ready(compacted, 23)
    [(header, _)] = list(iter_batches(got.records))
    assert (header.base_offset, header.last_offset, header.producer_id, header.base_sequence) == (25, 27, 4, 105)
    assert [(r.offset, r.key) for r in decode_records(got.records)] == [(25, b"k25"), (27, b"k27")]
    assert got.trimmed == 1 and got.record_count == 2


def document(**link: object) -> dict[str, object]:
    return {"link": {"name": "east", **link}, "topics": {"include": ["orders"]},
            "source": {"bootstrap.servers": "a:9092"}, "destination": {"bootstrap.servers": "b:9092"}}


def test_preserve_mode_creates_destination_topics_marked_for_its_link_only() -> None:
    config = parse_config(document(offsets="preserve"))
    assert config.preserves_offsets
    steps = plan(config, {"orders": TopicState(3, {"retention.ms": "1000", "mirror.source": "west"})}, {})
    assert steps.create["orders"] == TopicState(3, {"retention.ms": "1000", "mirror.source": "east"})
    kept = plan(config, {"orders": TopicState(3, {})}, {"orders": TopicState(3, {"mirror.source": "east"})})
    assert kept.alter == {}  # never deleted by the config sync


@pytest.mark.parametrize(("doc", "message"), [
    (document(offsets="keep"), "link.offsets: expected translate or preserve"),
    ({**document(offsets="preserve"), "source": {"bootstrap.servers": "a:9093", "security.protocol": "SASL_SSL"}},
     r"source.sasl.mechanism='GSSAPI' is not supported by tidelog's own connections"),
    ({**document(offsets="preserve"), "destination": {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
                                                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mirror"}},
     "destination.sasl.password is required"),
    ({**document(offsets="preserve"), "destination": {"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                                                      "ssl.ca.location": "/nonexistent/ca.pem"}},
     "destination.ssl.ca.location=/nonexistent/ca.pem"),
    ({**document(offsets="preserve"), "source": {"bootstrap.servers": "a:9093", "security.protocol": "TLS"}},
     "source.security.protocol='TLS' must be one of"),
])
def test_preserve_mode_settings_are_checked_before_anything_starts(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(doc)


def test_preserve_mode_accepts_the_security_settings_its_own_connections_speak() -> None:
    secured = {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
               "sasl.username": "mirror", "sasl.password": "s3cret"}
    config = parse_config({**document(offsets="preserve"), "destination": secured,
                           "source": {"bootstrap.servers": "a:9093", "security.protocol": "SASL_PLAINTEXT",
                                      "sasl.mechanism": "PLAIN", "sasl.username": "m", "sasl.password": "p"}})
    assert config.destination["sasl.mechanism"] == "SCRAM-SHA-256"


def test_translate_offsets_says_a_preserving_link_has_nothing_to_translate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "keep.toml", name="east", source="127.0.0.1:1", destination="127.0.0.1:1",
                          include=["orders"], link={"offsets": "preserve"})
    run = run_cli(capsys, "mirror", "translate-offsets", "--config", str(config), "--group", "billing")
    assert run.code == 1
    assert "link east preserves offsets" in run.err and "nothing to translate" in run.err
