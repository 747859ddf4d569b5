"""Many connections each queueing small requests, against a broker subprocess: the receive budget
(``queued.max.request.bytes``) counts every request, not only those larger than 64 KiB.

Each hostile connection sends a Fetch that long-polls (its connection is served one request at a time,
so everything sent after it waits) and then pipelines 60 KiB requests, just under the receive area, as
fast as the broker takes them. Before every request counted, each connection could queue 4 MiB (its
own queue's cap) and 40 of them held 130 MiB however small the budget; now reading stops once the
budget is full. The test measures the broker's peak RSS, the budget's gauges, and the latency of a
producer working meanwhile (a connection that holds no request may always read its next one).
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import create_topic
from helpers.hostile import Bystander, connect_from, metric, peak_rss
from helpers.raw_client import encode_request

MIB = 1 << 20
BUDGET = 8 * MIB
CONNECTIONS = 40
FRAME = 60 * 1024  # fits the 64 KiB receive area: not reserved ahead, only charged as it arrives
PER_CONNECTION = 56 * FRAME  # 3.3 MiB, under the 4 MiB a connection may queue
HOLD_MS = 4000  # the long-polling fetch in front of the queued requests
READ_AREA = 64 * 1024
MARGIN = 24 * MIB  # the bystander, a receive area per connection, the allocator's slack
P99_LIMIT_MS = 50.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("hostile-small"), {
        "auto.create.topics.enable": "false", "metrics.port": free_port(), "queued.max.request.bytes": BUDGET,
    })
    process.start()
    create_topic(process.bootstrap, "bystander")
    create_topic(process.bootstrap, "quiet")
    yield process
    process.close()


def long_poll() -> bytes:
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=HOLD_MS), min_bytes=1, max_bytes=1 << 20, session_id=0,
        session_epoch=-1, forgotten_topics_data=(),
        topics=(FetchTopic(topic="quiet", partitions=(
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
    )
    frame = encode_request(request, correlation_id=1)
    return struct.pack(">i", len(frame)) + frame


def small_request(correlation_id: int) -> bytes:
    """An ApiVersions header padded to FRAME bytes: what it says matters less than that it waits."""
    frame = encode_request(ApiVersionsRequest(), correlation_id=correlation_id)
    frame += bytes(FRAME - len(frame))
    return struct.pack(">i", len(frame)) + frame


def push(socks: list[socket.socket], payload: bytes, seconds: float) -> int:
    """Send ``payload`` on every socket as far as the broker takes it within ``seconds``; bytes sent."""
    offsets = [0] * len(socks)
    for sock in socks:
        sock.setblocking(False)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(offset < len(payload) for offset in offsets):
        progressed = False
        for index, sock in enumerate(socks):
            if offsets[index] < len(payload):
                try:
                    offsets[index] += sock.send(payload[offsets[index]:offsets[index] + 256 * 1024])
                    progressed = True
                except BlockingIOError:
                    pass
        if not progressed:
            time.sleep(0.01)
    return sum(offsets)


def test_forty_connections_queueing_small_requests_take_no_more_memory_than_the_receive_budget(
    broker: BrokerProcess,
) -> None:
    port = int(broker.properties["metrics.port"])
    requests = b"".join(small_request(2 + n) for n in range(PER_CONNECTION // FRAME))
    with Bystander(broker.bootstrap, "bystander") as bystander:
        time.sleep(0.5)
        before = peak_rss(broker.pid)
        first = len(bystander.latencies)
        socks = [connect_from(f"127.0.1.{n + 1}", broker.host, broker.port) for n in range(CONNECTIONS)]
        try:
            for sock in socks:
                sock.sendall(long_poll())
            time.sleep(0.2)
            pushed = push(socks, requests, seconds=2.0)
            time.sleep(1.0)  # the budget stays full while the long polls last
            reserved = metric(port, "tidelog_request_receive_budget_reserved_bytes")
            waiting = metric(port, "tidelog_request_receive_budget_waiting_connections")
            during = sorted(bystander.latencies[first:])
        finally:
            for sock in socks:
                sock.close()
        grown = peak_rss(broker.pid) - before
        wait_until(lambda: metric(port, "tidelog_request_receive_budget_reserved_bytes") < MIB, timeout=HOLD_MS / 1000 + 5,
                   message="the budget to be given back once the long polls end")
        time.sleep(0.3)
    p99_during = during[int(len(during) * 0.99) - 1] * 1000
    print(f"\n{CONNECTIONS} connections wrote {pushed / MIB:.0f} MiB of 60 KiB requests behind long polls: "
          f"budget {reserved / MIB:.1f} of {BUDGET / MIB:.0f} MiB held, {waiting:.0f} connections paused; broker "
          f"peak RSS grew {grown / MIB:.0f} MiB; bystander p99 {p99_during:.1f} ms over the {len(during)} records "
          f"meanwhile ({bystander.p99_ms():.1f} ms over all {len(bystander.latencies)})")
    assert BUDGET <= reserved <= BUDGET + CONNECTIONS * READ_AREA + MIB, "small requests were not counted"
    assert waiting >= CONNECTIONS // 2
    assert grown < BUDGET + MARGIN, f"broker peak RSS grew by {grown / MIB:.0f} MiB"
    assert not bystander.errors and len(during) >= 100
    assert p99_during < P99_LIMIT_MS, "a client holding no request was held back by the full budget"
