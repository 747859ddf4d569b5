"""What the disk-pool routing costs the common case: a hot Fetch and a Produce, with and without it.

    python bench/isolation_overhead.py [--count N] [--rounds R]

The same in-process broker and request path as ``request_path_bench.py`` (frames fed to
``Server._handle``; a Fetch v16 of one partition that finds one new record, read from the page
cache; a Produce v10 of one 200 B record, acks=all): rounds alternate between the broker as it runs
(``ctx.disk`` set: every read that finds bytes is classified hot or cold and its dir checked; hot
reads stay inline) and the same broker with ``ctx.disk = None`` (the code path before the pools).
Alternating in one process, and timing with the process's CPU clock as well as the wall clock,
keeps the comparison fair on a loaded machine. Prints the median µs per request of each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from request_path_bench import NullWriter, fetch_frame, produce_frame

from tidelog.broker.context import ConnectionInfo
from tidelog.broker.node import BrokerNode
from tidelog.common.config import BrokerConfig


async def run(count: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        node = BrokerNode(BrokerConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(Path(workdir) / "data"),
        }))
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
            conn = ConnectionInfo(peer="bench", listener=server.bound[0], host="127.0.0.1")
            writer: Any = NullWriter()
            sequence = 0
            disk = ctx.disk

            async def produce_once() -> None:
                nonlocal sequence
                frame = produce_frame("bench", sequence, producer_id)
                sequence += 1
                await server._handle(conn, memoryview(frame)[4:], writer, time.perf_counter())

            async def fetch_once() -> None:
                end = log.log_end_offset
                await server._handle(conn, memoryview(fetch_frame(topic_id, end - 1, 7))[4:], writer, time.perf_counter())

            await produce_once()
            samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for i in range(rounds * 2):  # rounds of each mode
                mode = "pools" if i % 4 in (0, 3) else "no pools"  # ABBA: neither always goes first
                ctx.disk = disk if mode == "pools" else None
                for name, case in (("fetch", fetch_once), ("produce", produce_once)):
                    wall, cpu = time.perf_counter(), time.process_time()
                    for _ in range(count):
                        await case()
                    samples.setdefault((name, mode), []).append(
                        ((time.perf_counter() - wall) / count * 1e6, (time.process_time() - cpu) / count * 1e6))
            ctx.disk = disk
            print(f"{'request':10s} {'mode':9s} {'wall us':>8s} {'cpu us':>8s}   (medians of {rounds} rounds x {count})")
            for (name, mode), values in sorted(samples.items()):
                print(f"{name:10s} {mode:9s} {statistics.median(v[0] for v in values):8.1f} "
                      f"{statistics.median(v[1] for v in values):8.1f}")
        finally:
            await node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.run(run(args.count, args.rounds))
    except ImportError:
        asyncio.run(run(args.count, args.rounds))


if __name__ == "__main__":
    main()
