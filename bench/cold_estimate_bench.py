"""How often one consumer Fetch places its read against the page-cache estimate, and what a Fetch costs.

    python bench/cold_estimate_bench.py [--count N] [--rounds R]

The in-process broker and request path of ``request_path_bench.py`` (frames fed to
``Server._handle``), one partition of 1 MiB segments holding about 3 MiB of 200 B records. Two
Fetch v16 cases of one partition, each reading 1 MiB at most: **hot** (one record before the log
end, in the active segment) and **old segment** (offset 0, a segment rolled long ago: the read the
disk pools may move off the loop). For each it counts the calls of the estimate's rule
(``read_throttle.is_cold``, wrapped with a counter) per Fetch, and times the Fetch (median µs of
``rounds`` rounds of ``count``, wall and process CPU). Figures, not pass/fail; it runs the same on
any commit that has ``read_throttle.is_cold``, so a change can be measured before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from request_path_bench import NullWriter, fetch_frame, produce_frame

import tidelog.broker.read_throttle as read_throttle
from tidelog.broker.context import ConnectionInfo
from tidelog.broker.node import BrokerNode
from tidelog.common.config import BrokerConfig

calls = 0
_is_cold = read_throttle.is_cold


def counted_is_cold(*args: Any) -> bool:
    global calls
    calls += 1
    return _is_cold(*args)


async def run(count: int, rounds: int) -> None:
    read_throttle.is_cold = counted_is_cold  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as workdir:
        node = BrokerNode(BrokerConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(Path(workdir) / "data"),
        }))
        await node.start()
        await asyncio.sleep(0.2)  # the cold-read runtime's task takes up the log dirs
        try:
            assert node.server is not None and node.ctx is not None
            server, ctx = node.server, node.ctx
            assert (await ctx.topics.create_topic("bench", 1, 1, configs=[("segment.bytes", str(1 << 20))])).ok
            topic_id = ctx.image.topics["bench"].topic_id.bytes
            assert ctx.producer_ids is not None
            producer_id = await ctx.producer_ids.allocate()
            log = ctx.logs.get_log("bench", 0)
            assert log is not None
            conn = ConnectionInfo(peer="bench", listener=server.bound[0], host="127.0.0.1")
            writer: Any = NullWriter()
            for sequence in range(12_000):  # ~3 MiB: three segments
                await server._handle(conn, memoryview(produce_frame("bench", sequence, producer_id))[4:], writer,
                                     time.perf_counter())
            assert log.active_segment.base_offset > 0

            def fetcher(offset: Callable[[], int]) -> Callable[[], Awaitable[None]]:
                async def once() -> None:
                    await server._handle(conn, memoryview(fetch_frame(topic_id, offset(), 7))[4:], writer, time.perf_counter())
                return once

            cases = {"hot": fetcher(lambda: log.log_end_offset - 1), "old segment": fetcher(lambda: 0)}
            global calls
            print(f"{'fetch':12s} {'estimates':>9s} {'wall us':>8s} {'cpu us':>8s}   (medians of {rounds} rounds x {count})")
            for name, case in cases.items():
                calls = 0
                await case()
                per_fetch = calls
                walls, cpus = [], []
                for _ in range(rounds):
                    wall, cpu = time.perf_counter(), time.process_time()
                    for _ in range(count):
                        await case()
                    walls.append((time.perf_counter() - wall) / count * 1e6)
                    cpus.append((time.process_time() - cpu) / count * 1e6)
                print(f"{name:12s} {per_fetch:9d} {statistics.median(walls):8.1f} {statistics.median(cpus):8.1f}")
        finally:
            await node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.run(run(args.count, args.rounds))
    except ImportError:
        asyncio.run(run(args.count, args.rounds))


if __name__ == "__main__":
    main()
