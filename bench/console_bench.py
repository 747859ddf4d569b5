"""The console on a big cluster: every page timed (issue 23's target: under 1 s each at 10,000 partitions
and 1,000 groups).

    python bench/console_bench.py                                  # 10,000 partitions, 1,000 groups
    python bench/console_bench.py --topics 40 --partitions 50 --groups 200   # a smaller check

Set-up, on a fresh broker of its own: ``topics`` topics of ``partitions`` partitions each, 10 records
in every partition of the first topic, then ``groups`` groups, each with committed offsets on every
partition of one topic (written with AlterConsumerGroupOffsets, so the groups have no members, as a
fleet of stopped consumers). A console is started against it with a 5 s lag interval.

Measured, after the sampler's first poll: the sampler's poll time (its ``/metrics``), then each page
fetched ``--repeat`` times (the metadata cache is 2 s old at most, so most fetches are warm): overview,
topic list (first page and a search), one topic's page, its messages, the group list, one group's
page, the security page, the Burrow status and lag of one group, the console's ``/metrics``, and the
Platform pages over a governor plan of ``partitions`` moves, a mirror link with ``10 * partitions``
checkpoints and ``sources`` gateway sources (``platform_state``). The
median and worst time per page are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers.broker_process import BrokerProcess  # noqa: E402
from helpers.console_process import ConsoleProcess  # noqa: E402


def build(bootstrap: str, topics: int, partitions: int, groups: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"bench-{i:04d}" for i in range(topics)]
    for start in range(0, topics, 20):
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names[start:start + 20]],
                                      request_timeout=120)
        for future in futures.values():
            future.result(180)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p in range(partitions):
        for i in range(10):
            producer.produce(names[0], value=f"record {i}".encode(), partition=p)
    producer.flush(60)
    for start in range(0, groups, 50):
        futures = {}
        for g in range(start, min(groups, start + 50)):
            topic = names[g % topics]
            offsets = [TopicPartition(topic, p, 5 if topic == names[0] else 0) for p in range(partitions)]
            futures.update(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(f"bench-group-{g:04d}",
                                                                                            offsets)]))
        for future in futures.values():
            future.result(60)
    return names


def platform_state(bootstrap: str, names: list[str], partitions: int, sources: int) -> None:
    """What the Platform pages read, written with each part's own encoders: a governor plan moving
    every partition of the first topic, a mirror link of 16 shards with a checkpoint per partition of
    the first ten topics, and ``sources`` gateway sources (their last seqno) over 8 state partitions."""
    from tidelog.gateway.seqno import SourceState
    from tidelog.gateway.state_codec import encode_state, shard_of, state_key
    from tidelog.governor.planner import PartitionMove
    from tidelog.governor.store import Store
    from tidelog.mirror.position import Checkpoint
    from tidelog.mirror.position import shard_of as mirror_shard

    admin = AdminClient({"bootstrap.servers": bootstrap})
    store = Store({"bootstrap.servers": bootstrap})
    store.ensure(admin)
    moves = [PartitionMove(names[0], p, (1,), (2,), 1 << 20) for p in range(partitions)]
    store.write("plan", {"id": "bench", "createdMs": int(time.time() * 1000), "reason": "bench", "throttle": 0,
                         "moves": [m.to_json() for m in moves], "cancelled": []})
    topics = {"__tidelog_mirror.bench": 16, "__tidelog_gateway_state": 8}
    for future in admin.create_topics([NewTopic(t, n, 1, config={"cleanup.policy": "compact"})
                                       for t, n in topics.items()]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    now = int(time.time() * 1000)
    for topic in names[:10]:
        for p in range(partitions):
            c = Checkpoint(topic, p, 10, 10, now, now, [(10, 10)])
            producer.produce("__tidelog_mirror.bench", key=c.key, value=c.encode(), partition=mirror_shard(topic, p, 16))
    for n in range(sources):
        key = state_key(names[n % len(names)], f"source-{n:06d}")
        producer.produce("__tidelog_gateway_state", key=key, value=encode_state(SourceState(n, n % partitions)),
                         partition=shard_of(key, 8))
        if n % 10000 == 0:
            producer.poll(0)
    producer.flush(120)


def time_pages(console: ConsoleProcess, topic: str, repeat: int) -> list[tuple[str, float, float, int]]:
    pages = {
        "overview": "/", "overview (JSON)": "/api/overview", "topics": "/topics", "topics search": "/topics?q=0042",
        "topics sorted": "/topics?sort=partitions&desc=1", "topic": f"/topics/{topic}",
        "messages (end)": f"/topics/{topic}/messages?partition=0",
        "messages (filter)": f"/topics/{topic}/messages?partition=0&start=offset&offset=0&contains=record+7",
        "groups": "/groups", "groups by lag": "/groups?sort=lag&desc=1", "group": "/groups/bench-group-0000",
        "group (JSON)": "/api/groups/bench-group-0000", "security": "/security",
        "burrow status": "/v3/kafka/local/consumer/bench-group-0000/status",
        "burrow lag": "/v3/kafka/local/consumer/bench-group-0000/lag", "burrow consumers": "/v3/kafka/local/consumer",
        "metrics": "/metrics",
        "platform": "/platform", "platform governor": "/platform/governor",
        "platform governor search": "/platform/governor?q=bench&state=pending&page=2",
        "platform mirror": "/platform/mirror", "platform mirror by lag": "/platform/mirror?sort=commit&desc=1",
        "platform gateway": "/platform/gateway", "platform gateway search": "/platform/gateway?q=source-0042",
        "platform gateway by seqno": "/platform/gateway?sort=seqno&desc=1",
    }
    rows = []
    with httpx.Client(base_url=console.url, timeout=60) as client:
        for name, path in pages.items():
            times, size = [], 0
            for _ in range(repeat):
                started = time.perf_counter()
                answer = client.get(path)
                times.append(time.perf_counter() - started)
                answer.raise_for_status()
                size = len(answer.content)
            rows.append((name, statistics.median(times), max(times), size))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100, help="per topic")
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sources", type=int, default=10000, help="gateway sources in its state topic")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", {"num.partitions": 1, "offsets.topic.num.partitions": 4})
        with broker:
            started = time.perf_counter()
            names = build(broker.bootstrap, args.topics, args.partitions, args.groups)
            platform_state(broker.bootstrap, names, args.partitions, args.sources)
            print(f"cluster: {args.topics * args.partitions} partitions in {args.topics} topics, {args.groups} "
                  f"groups (built in {time.perf_counter() - started:.1f} s)")
            settings = {"console.lag.interval.ms": 5000, "console.request.timeout.ms": 60000}
            with ConsoleProcess(Path(tmp) / "console", broker.bootstrap, settings).start(timeout=300) as console:
                metrics = httpx.get(console.url + "/metrics", timeout=60).text
                polls = [line for line in metrics.splitlines() if line.startswith("tidelog_console_lag_pol")]
                print(f"sampler: {'; '.join(polls) or 'no poll yet'}")
                rows = time_pages(console, names[0], args.repeat)
                poll_s = httpx.get(console.url + "/readyz", timeout=60).text.strip().replace("\n", "; ")
                print(f"readiness: {poll_s}")
    print("\n| page | median | worst | bytes |\n|---|---:|---:|---:|")
    for name, median, worst, size in rows:
        print(f"| {name} | {median * 1000:.0f} ms | {worst * 1000:.0f} ms | {size:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
