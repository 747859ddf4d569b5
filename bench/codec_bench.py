"""Codec figures: µs per operation, kio's generic writer against tidelog's hand-written encoders.

    python bench/codec_bench.py [--repeat N]

Cases: FetchResponse v16 with 10 partitions of 64 KiB records; MetadataResponse v12 with 100
topics x 10 partitions (3 replicas each); decode of a ProduceRequest v9 carrying one 64 KiB batch;
and the small requests of the latency workload (a Produce v9 of one 200 B record, a Fetch v12 of one
partition): the request header, the whole decode, and its parts: the schema walk that guards kio as
the broker runs it (compiled per request class, ``codec._check``), the same walk interpreted
(``codec._Walker``, what decoding did before session 4 and what still strips unknown tags) and kio's
own reader. Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import datetime
import io
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.fetch.v16 import response as fetch
from kio.schema.metadata.v12 import response as metadata
from kio.schema.produce.v9 import request as produce
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from tidelog.protocol.codec import _check, _plan, _reader, _Walker, decode_request, encode_response
from tidelog.protocol.headers import parse_request_header
from tidelog.protocol.records import Record, build_batch

ZERO = i32Timedelta.parse(datetime.timedelta(0))


def kio_encode(response: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    return buffer.getvalue()


def fetch_response() -> Any:
    partitions = tuple(
        fetch.PartitionData(
            partition_index=i32(index),
            error_code=ErrorCode.none,
            high_watermark=1_000_000,
            last_stable_offset=1_000_000,
            log_start_offset=0,
            aborted_transactions=None,
            records=bytes(64 * 1024),
        )
        for index in range(10)
    )
    topic = fetch.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=partitions)
    return fetch.FetchResponse(
        throttle_time=ZERO, error_code=ErrorCode.none, session_id=0, responses=(topic,)
    )


def metadata_response() -> Any:
    brokers = tuple(
        metadata.MetadataResponseBroker(node_id=i32(n), host=f"broker-{n}.local", port=i32(9092), rack=None)
        for n in range(3)
    )
    topics = tuple(
        metadata.MetadataResponseTopic(
            error_code=ErrorCode.none,
            name=f"topic-{t:03d}",
            topic_id=uuid.uuid4(),
            is_internal=False,
            partitions=tuple(
                metadata.MetadataResponsePartition(
                    error_code=ErrorCode.none,
                    partition_index=i32(p),
                    leader_id=i32(p % 3),
                    leader_epoch=i32(5),
                    replica_nodes=(i32(0), i32(1), i32(2)),
                    isr_nodes=(i32(0), i32(1), i32(2)),
                    offline_replicas=(),
                )
                for p in range(10)
            ),
            topic_authorized_operations=i32(-2147483648),
        )
        for t in range(100)
    )
    return metadata.MetadataResponse(
        throttle_time=ZERO, brokers=brokers, cluster_id="tidelog", controller_id=i32(0), topics=topics
    )


def small_frames() -> dict[str, bytes]:
    """The latency workload's requests: a Produce v9 of one 200 B record, a Fetch v12 of one partition."""
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"x" * 200)])
    produce_request = produce.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=30),
        topic_data=(produce.TopicProduceData(
            name="lat", partition_data=(produce.PartitionProduceData(index=i32(0), records=batch),)),),
    )
    fetch_req = fetch_request.FetchRequest(
        replica_id=i32(-1), max_wait=datetime.timedelta(milliseconds=500), min_bytes=i32(1), max_bytes=i32(52_428_800),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(fetch_request.FetchTopic(topic="lat", partitions=(fetch_request.FetchPartition(
            partition=i32(0), current_leader_epoch=i32(0), fetch_offset=i64(100), last_fetched_epoch=i32(0),
            log_start_offset=i64(-1), partition_max_bytes=i32(1_048_576)),)),),
        forgotten_topics_data=(), rack_id="",
    )
    frames = {}
    for name, request in (("Produce v9, 1 x 200 B", produce_request), ("Fetch v12, 1 partition", fetch_req)):
        header = KioHeaderV2(request_api_key=i16(request.__api_key__), request_api_version=i16(request.__version__),
                             correlation_id=i32(7), client_id="rdkafka")
        frames[name] = kio_encode(header) + kio_encode(request)
    return frames


def produce_frame() -> bytes:
    request = produce.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce.TopicProduceData(
                name="events",
                partition_data=(produce.PartitionProduceData(index=i32(0), records=bytes(64 * 1024)),),
            ),
        ),
    )
    header = KioHeaderV2(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(1), client_id="bench"
    )
    return kio_encode(header) + kio_encode(request)


def per_call_us(func: Callable[[], object], repeat: int) -> float:
    number = max(1, repeat)
    best = min(timeit.repeat(func, number=number, repeat=5))
    return best / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()

    fetch_resp = fetch_response()
    fetch_header = parse_request_header(
        kio_encode(
            KioHeaderV2(
                request_api_key=i16(1), request_api_version=i16(16), correlation_id=i32(1), client_id="b"
            )
        )
    )
    meta_resp = metadata_response()
    meta_header = parse_request_header(
        kio_encode(
            KioHeaderV2(
                request_api_key=i16(3), request_api_version=i16(12), correlation_id=i32(1), client_id="b"
            )
        )
    )
    assert b"".join(bytes(p) for p in encode_response(fetch_header, fetch_resp))[9:] == kio_encode(fetch_resp)
    assert b"".join(bytes(p) for p in encode_response(meta_header, meta_resp))[9:] == kio_encode(meta_resp)
    frame = produce_frame()

    rows = [
        (
            "Fetch v16, 10 x 64 KiB",
            lambda: kio_encode(fetch_resp),
            lambda: encode_response(fetch_header, fetch_resp),
        ),
        (
            "Metadata v12, 100 x 10",
            lambda: kio_encode(meta_resp),
            lambda: encode_response(meta_header, meta_resp),
        ),
    ]
    print(f"{'case':<28}{'kio µs':>12}{'tidelog µs':>14}{'speed-up':>10}")
    for name, kio_func, our_func in rows:
        kio_us = per_call_us(kio_func, max(1, args.repeat // 10) if "Metadata" in name else args.repeat)
        our_us = per_call_us(our_func, args.repeat)
        print(f"{name:<28}{kio_us:>12.1f}{our_us:>14.1f}{kio_us / our_us:>9.1f}x")
    decode_us = per_call_us(lambda: decode_request(parse_request_header(frame), frame), args.repeat * 10)
    print(f"{'Produce v9 decode, 64 KiB':<28}{'':>12}{decode_us:>14.1f}")
    print(f"\n{'small request':<28}{'header µs':>10}{'decode µs':>10}{'walk µs':>10}{'walk interp.':>13}{'kio µs':>10}")
    for name, small in small_frames().items():
        header = parse_request_header(small)
        cls = type(decode_request(header, small))
        plan, read, check = _plan(cls), _reader(cls), _check(cls)
        figures = [
            per_call_us(lambda small=small: parse_request_header(small), args.repeat * 10),  # type: ignore[misc]
            per_call_us(lambda small=small, header=header: decode_request(header, small), args.repeat * 10),  # type: ignore[misc]
            per_call_us(lambda small=small, header=header, check=check: check(small, header.body_offset),  # type: ignore[misc]
                        args.repeat * 10),
            per_call_us(lambda small=small, header=header, plan=plan: _Walker(small, strip=False).walk(  # type: ignore[misc]
                plan, header.body_offset), args.repeat * 10),
            per_call_us(lambda small=small, header=header, read=read: read(small, header.body_offset),  # type: ignore[misc]
                        args.repeat * 10),
        ]
        print(f"{name:<28}" + "".join(f"{value:>{13 if i == 3 else 10}.1f}" for i, value in enumerate(figures)))


if __name__ == "__main__":
    main()
