"""Position records: the JSON a restart reads back is the state that was written."""

from __future__ import annotations

from tidelog.agent.files import SavedGeneration
from tidelog.agent.positions import SavedSource, consumer_settings, decode, encode, key_of


def test_a_position_record_reads_back_as_written() -> None:
    source = SavedSource("web-1:/var/log/app.log", "/var/log/app.log", "app-logs", 3,
                         [SavedGeneration(1, 2049, 77, 4096, 1024, 123), SavedGeneration(2, 2049, 78, 0, 0, 0)])
    assert decode(encode("web-1", source)) == ("web-1", source)
    assert key_of("web-1", source.source_id) == b"web-1|web-1:/var/log/app.log"


def test_the_positions_reader_gets_connection_settings_only() -> None:
    settings = consumer_settings({"bootstrap.servers": "b:9092", "linger.ms": 5, "compression.type": "lz4",
                                  "security.protocol": "SASL_SSL", "sasl.username": "u"})
    assert settings["bootstrap.servers"] == "b:9092" and settings["sasl.username"] == "u"
    assert "linger.ms" not in settings and "compression.type" not in settings
    assert settings["isolation.level"] == "read_committed"
