"""Clients that pipeline: many large requests sent before any response is read, and half-closes.

The broker reads requests straight into their frame buffers and pauses reading while 4 MiB of
frames wait to be served (``broker/connection.py``). These tests hold it to what that promises: every
pipelined request answered, in order, each record stored once; memory bounded however much a
client sends ahead; requests sent before a half-close still answered.
"""

from __future__ import annotations

import datetime
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.clients import create_topic, watermarks
from helpers.raw_client import RawClient, decode_response, encode_request, record_batch

TOPIC = "pipelined"
MIB = 1 << 20
RSS_GROWTH_BOUND = 64 * MIB


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("pipelining-broker"), {"socket.request.max.bytes": 4 * MIB})
    process.start()
    create_topic(process.bootstrap, TOPIC)
    yield process
    process.close()


def produce_frame(correlation_id: int, values: list[bytes]) -> bytes:
    request = ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(
            PartitionProduceData(index=0, records=record_batch(values)),)),),
    )
    payload = encode_request(request, correlation_id=correlation_id, api_version=9)
    return struct.pack(">i", len(payload)) + payload


def test_sixty_pipelined_one_mib_requests_are_all_answered_in_order_with_bounded_memory(broker: BrokerProcess) -> None:
    requests = 60
    values = [bytes([i % 251]) * 1024 for i in range(1000)]  # ~1 MiB per request
    frames = [produce_frame(i + 1, values) for i in range(requests)]
    rss_before = broker.rss_bytes()
    with RawClient(broker.host, broker.port, timeout=60) as raw:
        # Send everything from another thread without reading: the broker must pause reading, not buffer 60 MiB.
        sender = threading.Thread(target=lambda: raw.send_bytes(b"".join(frames)))
        sender.start()
        peak = rss_before
        base_offsets = []
        for correlation_id in range(1, requests + 1):
            received_id, response = decode_response(ProduceResponse, raw.receive_frame())
            assert received_id == correlation_id
            (partition,) = response.responses[0].partition_responses
            assert partition.error_code == ErrorCode.none
            base_offsets.append(partition.base_offset)
            peak = max(peak, broker.rss_bytes())
        sender.join(30)
    assert base_offsets == [i * len(values) for i in range(requests)]
    assert peak - rss_before < RSS_GROWTH_BOUND, f"RSS grew by {(peak - rss_before) / MIB:.0f} MiB"
    low, high = watermarks(broker.bootstrap, TOPIC)[0]
    assert (low, high) == (0, requests * len(values))


def test_requests_sent_before_a_half_close_are_answered(broker: BrokerProcess) -> None:
    frames = [produce_frame(100 + i, [b"half-close"]) for i in range(3)]
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(b"".join(frames))
        sock.shutdown(socket.SHUT_WR)
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
    ids = []
    while received:
        (size,) = struct.unpack_from(">i", received)
        correlation_id, response = decode_response(ProduceResponse, bytes(received[4 : 4 + size]))
        (partition,) = response.responses[0].partition_responses
        assert partition.error_code == ErrorCode.none
        ids.append(correlation_id)
        del received[: 4 + size]
    assert ids == [100, 101, 102]
