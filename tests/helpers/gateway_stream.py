"""A stream of chunks from many sources through gateways, with retries, and its checker.

``send_stream(urls, topic, sources, chunks_per_source, ...)`` runs one asyncio task per source; a
task sends its chunks in requests of ``chunks_per_request`` chunks (seqnos 1, 2, 3...), each chunk
holding ``records_per_chunk`` records ``b"<source>:<seqno>:<i>"``, and resends a request until a
gateway answers 200 (a refused connection, a 5xx or a timeout are all retried with the same seqnos,
the way a well-behaved client does). Requests go to ``urls`` round robin, so with several gateways
a source hops between instances. ``on_progress(fraction)`` is called as requests are acknowledged,
to kill things mid-stream.

``check_exactly_once(bootstrap, topic, partitions, sources, chunks_per_source, records_per_chunk)``
reads the topic ``read_committed`` to its end and asserts that every source's records are all
there, each exactly once, in seqno order, all in one partition.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import httpx
from confluent_kafka import Consumer, KafkaError, TopicPartition


async def _source(client: httpx.AsyncClient, urls: itertools.cycle[str], topic: str, source: str, chunks: int,
                  per_request: int, records: int, acked: list[int], total: int,
                  on_progress: Callable[[float], None]) -> int:
    retries = 0
    for first in range(1, chunks + 1, per_request):
        seqnos = range(first, min(first + per_request, chunks + 1))
        body = {"sourceId": source, "chunks": [
            {"seqno": s, "records": [{"value": f"{source}:{s}:{i}"} for i in range(records)]} for s in seqnos]}
        while True:
            try:
                answer = await client.post(f"{next(urls)}/v1/topics/{topic}/write", json=body)
                if answer.status_code == 200:
                    break
                assert answer.status_code in (503, 421), answer.text  # anything else is a bug, not a retry
            except httpx.HTTPError:
                pass
            retries += 1
            await asyncio.sleep(0.05)
        acked[0] += 1
        on_progress(acked[0] / total)
    return retries


async def _stream(urls: list[str], topic: str, sources: int, chunks: int, per_request: int, records: int,
                  on_progress: Callable[[float], None]) -> int:
    total = sources * -(-chunks // per_request)
    acked = [0]
    cycle = itertools.cycle(urls)
    async with httpx.AsyncClient(timeout=20, limits=httpx.Limits(max_connections=sources)) as client:
        results = await asyncio.gather(*(
            _source(client, cycle, topic, f"src-{n}", chunks, per_request, records, acked, total, on_progress)
            for n in range(sources)))
    return sum(results)


def send_stream(urls: list[str], topic: str, sources: int, chunks_per_source: int, *, chunks_per_request: int = 5,
                records_per_chunk: int = 2, on_progress: Callable[[float], None] = lambda _: None) -> int:
    """Send the whole stream; returns how many requests were retried."""
    return asyncio.run(_stream(urls, topic, sources, chunks_per_source, chunks_per_request, records_per_chunk,
                               on_progress))


def check_exactly_once(bootstrap: str, topic: str, partitions: int, sources: int, chunks_per_source: int,
                       records_per_chunk: int = 2) -> int:
    """Assert every record of the stream is in the topic exactly once, in order; returns the record count."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gateway-checker", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[str, list[tuple[int, int]]] = {}
    where: dict[str, set[int]] = {}
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            batch = consumer.consume(10_000, 5)
            assert batch, "the checker reached no end of partition"
            for message in batch:
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    ended.add(message.partition())
                    continue
                source, seqno, index = (message.value() or b"").decode().split(":")
                seen.setdefault(source, []).append((int(seqno), int(index)))
                where.setdefault(source, set()).add(message.partition())
    finally:
        consumer.close()
    expected = [(s, i) for s in range(1, chunks_per_source + 1) for i in range(records_per_chunk)]
    assert sorted(seen) == sorted(f"src-{n}" for n in range(sources))
    for source, records in seen.items():
        assert records == expected, f"{source}: {_diff(records, expected)}"
        assert len(where[source]) == 1, f"{source} written to partitions {where[source]}"
    return sum(len(r) for r in seen.values())


def _diff(got: list[tuple[int, int]], expected: list[tuple[int, int]]) -> str:
    duplicates = len(got) - len(set(got))
    missing = sorted(set(expected) - set(got))[:5]
    out_of_order = next((i for i, (a, b) in enumerate(itertools.pairwise(got)) if a >= b), None)
    return f"{len(got)} records, {duplicates} duplicates, missing {missing}, first out of order at {out_of_order}"
