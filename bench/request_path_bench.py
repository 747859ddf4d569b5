"""The broker's own Python cost per small request, without sockets or clients: µs per request.

    python bench/request_path_bench.py [--count N] [--repeat R] [--profile]

Starts a real broker in this process (``BrokerNode``, a temporary log dir, uvloop), creates one
topic, then feeds frames straight to ``Server._handle``, the function every request goes through
(header, decode, handler, encode, metrics), with a writer that drops the response bytes. The cases
are the two requests of the latency workload (workload 3): a Produce v10 of one 200 B record
(acks=all, idempotent, as librdkafka sends it) and a Fetch v16 of one partition that finds one new
record (what the consumer's long-poll does after its wake-up). ``--profile`` runs the cases under
cProfile and prints the top functions.

What it leaves out is the kernel (``recv``/``send`` on loopback, the append's ``pwritev``) and the
event loop's own work, so it is the part that tidelog's code decides.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tidelog.broker.context import ConnectionInfo
from tidelog.broker.node import BrokerNode
from tidelog.common.config import BrokerConfig
from tidelog.protocol.encoders._wire import uvarint
from tidelog.protocol.records import Record, build_batch


class NullTransport:
    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


class NullWriter:
    """What ``Server._handle`` writes a response to: counts the bytes and drops them."""

    def __init__(self) -> None:
        self.transport = NullTransport()
        self.bytes = 0

    def writelines(self, buffers: list[Any]) -> None:
        self.bytes += sum(len(b) for b in buffers)

    def write(self, data: Any) -> None:
        self.bytes += len(data)

    def get_extra_info(self, name: str) -> None:
        return None


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _compact(raw: bytes) -> bytes:
    return uvarint(len(raw) + 1) + raw


def _header(api_key: int, version: int, correlation_id: int) -> bytes:
    # Request header v2 (flexible requests): key, version, correlation id, client id, no tags.
    return struct.pack(">hhi", api_key, version, correlation_id) + _string("rdkafka") + b"\x00"


def produce_frame(topic: str, sequence: int, producer_id: int) -> bytes:
    batch = build_batch([Record(0, int(time.time() * 1000), None, b"x" * 200)],
                        producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    body = (
        _header(0, 10, sequence) + b"\x00"  # transactional id: null
        + struct.pack(">hi", -1, 30_000)  # acks=all, timeout
        + uvarint(2) + _compact(topic.encode())  # one topic
        + uvarint(2) + struct.pack(">i", 0) + _compact(bytes(batch)) + b"\x00"  # one partition
        + b"\x00" + b"\x00"  # topic tags, request tags
    )
    return struct.pack(">i", len(body)) + body


def fetch_frame(topic_id: bytes, offset: int, correlation_id: int) -> bytes:
    body = (
        _header(1, 16, correlation_id)
        + struct.pack(">iiib", 500, 1, 52_428_800, 0)  # max wait, min bytes, max bytes, isolation
        + struct.pack(">ii", 0, -1)  # session id 0, epoch -1: no session (full fetch)
        + uvarint(2) + topic_id  # one topic, by id
        + uvarint(2) + struct.pack(">iiqiqi", 0, -1, offset, -1, -1, 1_048_576) + b"\x00"
        + b"\x00"  # topic tags
        + uvarint(1)  # forgotten topics: none
        + _compact(b"")  # rack id
        + b"\x00"  # request tags
    )
    return struct.pack(">i", len(body)) + body


async def run(count: int, repeat: int, profile: bool) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        config = BrokerConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(Path(workdir) / "data"),
        })
        node = BrokerNode(config)
        await node.start()
        try:
            assert node.server is not None and node.ctx is not None
            server, ctx = node.server, node.ctx
            assert (await ctx.topics.create_topic("bench", 1, 1)).ok
            topic_id = ctx.image.topics["bench"].topic_id.bytes
            assert ctx.producer_ids is not None
            producer_id = await ctx.producer_ids.allocate()
            log = ctx.logs.get_log("bench", 0)
            assert log is not None
            conn = ConnectionInfo(peer="bench", listener=node.server.bound[0], host="127.0.0.1")
            writer: Any = NullWriter()
            handle = server._handle  # the request path under measurement
            sequence = 0

            async def produce_once() -> None:
                nonlocal sequence
                frame = produce_frame("bench", sequence, producer_id)
                sequence += 1
                await handle(conn, memoryview(frame)[4:], writer, time.perf_counter())

            async def fetch_once() -> None:
                end = log.log_end_offset
                await handle(conn, memoryview(fetch_frame(topic_id, end - 1, 7))[4:], writer, time.perf_counter())

            frames_cost = time.perf_counter()
            for _ in range(count):
                produce_frame("bench", 0, producer_id)
            frames_cost = (time.perf_counter() - frames_cost) / count
            cases = {"produce (1 x 200 B, acks=all)": produce_once, "fetch (finds 1 record)": fetch_once}
            profiler = cProfile.Profile() if profile else None
            for name, case in cases.items():
                best = float("inf")
                for _ in range(repeat):
                    if profiler is not None:
                        profiler.enable()
                    start = time.perf_counter()
                    for _ in range(count):
                        await case()
                    elapsed = (time.perf_counter() - start) / count
                    if profiler is not None:
                        profiler.disable()
                    best = min(best, elapsed - (frames_cost if name.startswith("produce") else 0.0))
                print(f"{name:32s} {best * 1e6:8.1f} us/request")
            if profiler is not None:
                pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
        finally:
            await node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    import uvloop

    uvloop.run(run(args.count, args.repeat, args.profile))


if __name__ == "__main__":
    main()
