"""The HTTP endpoint: /metrics, /healthz, /readyz over a real socket, and the request-head parser."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from tidelog.observability.http import BadRequest, MetricsServer, Readiness, parse_request_head
from tidelog.observability.registry import MetricFamily, Registry


async def http(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` and read one response (the server closes when asked to)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    status, headers, body = await read_response(reader)
    writer.close()
    return status, headers, body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


def get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *extra]) + "\r\n\r\n").encode()


def run(coro_fn, registry: Registry, readiness: Readiness | None = None):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        server = MetricsServer(registry, "127.0.0.1", 0, readiness)
        await server.start()
        try:
            return await coro_fn(server.port)
        finally:
            await server.close()

    return asyncio.run(main())


def test_metrics_are_served_in_the_prometheus_text_format() -> None:
    registry = Registry()
    registry.counter("hits_total", "Hits.").inc((), 3)
    registry.add_collector(lambda: [MetricFamily("disk_bytes", "Disk.", "gauge").add((), 9)])
    status, headers, body = run(lambda port: http(port, get("/metrics")), registry)
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert body.decode().splitlines() == [
        "# HELP hits_total Hits.", "# TYPE hits_total counter", "hits_total 3",
        "# HELP disk_bytes Disk.", "# TYPE disk_bytes gauge", "disk_bytes 9",
    ]


def test_metrics_are_gzipped_when_the_scraper_accepts_it() -> None:
    registry = Registry()
    registry.counter("hits_total", "Hits.").inc()
    status, headers, body = run(lambda port: http(port, get("/metrics", "Accept-Encoding: gzip")), registry)
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert b"hits_total 1" in gzip.decompress(body)


def test_health_is_up_and_readiness_follows_its_checks() -> None:
    state = {"logs-loaded": True, "listeners-open": False}
    readiness = Readiness()
    for name in state:
        readiness.add(name, lambda name=name: state[name])  # type: ignore[misc]

    async def probe(port: int) -> list[tuple[int, bytes]]:
        out = []
        for path in ("/healthz", "/readyz"):
            status, _, body = await http(port, get(path))
            out.append((status, body))
        state["listeners-open"] = True
        status, _, body = await http(port, get("/readyz"))
        out.append((status, body))
        return out

    assert run(probe, Registry(), readiness) == [
        (200, b"ok\n"),
        (503, b"ok logs-loaded\nfail listeners-open\n"),
        (200, b"ok logs-loaded\nok listeners-open\n"),
    ]


def test_a_readiness_check_that_raises_counts_as_not_ready() -> None:
    readiness = Readiness()
    readiness.add("store", lambda: 1 // 0 == 0)
    status, _, body = run(lambda port: http(port, get("/readyz")), Registry(), readiness)
    assert (status, body) == (503, b"fail store\n")


def test_one_connection_serves_several_requests_when_kept_alive() -> None:
    registry = Registry()
    hits = registry.counter("hits_total", "Hits.")

    async def two_scrapes(port: int) -> list[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bodies = []
        for _ in range(2):
            hits.inc()
            writer.write(get("/metrics"))
            bodies.append((await read_response(reader))[2])
        writer.write(get("/healthz", "Connection: close"))
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await reader.read() == b""  # the server closed
        writer.close()
        return bodies

    first, second = run(two_scrapes, registry)
    assert b"hits_total 1" in first and b"hits_total 2" in second


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (get("/nope"), 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 400),
        (b"garbage\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n", 400),
    ],
)
def test_bad_requests_get_http_errors(raw: bytes, status: int) -> None:
    assert run(lambda port: http(port, raw), Registry())[0] == status


def test_head_answers_headers_only() -> None:
    async def head(port: int) -> tuple[dict[str, str], bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        data = await reader.read()
        writer.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        return {"status": head.split(b" ")[1].decode()}, rest

    headers, rest = run(head, Registry())
    assert headers["status"] == "200" and rest == b""


@pytest.mark.parametrize(
    ("raw", "method", "path", "keep_alive"),
    [
        (b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "/metrics", True),
        (b"GET /readyz HTTP/1.0\r\n\r\n", "GET", "/readyz", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "GET", "/", True),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", "GET", "/", False),
    ],
)
def test_request_heads_parse(raw: bytes, method: str, path: str, keep_alive: bool) -> None:
    head = parse_request_head(raw)
    assert (head.method, head.path, head.keep_alive) == (method, path, keep_alive)


@pytest.mark.parametrize("raw", [b"GET /x\r\n\r\n", b"GET x HTTP/1.1\r\n\r\n", b"GET / HTTP/2\r\n\r\n", b"GET / HTTP/1.1\r\nno colon\r\n\r\n"])
def test_malformed_heads_are_refused(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_request_head(raw)


def test_the_service_serves_runtime_metrics_and_readiness_while_running() -> None:
    from tidelog.observability.service import ObservabilityService

    async def main() -> tuple[int, bytes, int]:
        service = ObservabilityService("127.0.0.1", 0)
        loaded = asyncio.Event()
        service.readiness.add("logs-loaded", loaded.is_set)
        await service.start()
        try:
            assert service.port
            not_ready = (await http(service.port, get("/readyz")))[0]
            loaded.set()
            await asyncio.sleep(0.3)  # one event-loop lag sample
            status, _, body = await http(service.port, get("/metrics"))
            return not_ready, body, status
        finally:
            await service.stop()

    not_ready, body, status = asyncio.run(main())
    text = body.decode()
    assert not_ready == 503 and status == 200
    for name in ("tidelog_build_info{", "process_cpu_seconds_total ", "process_open_fds ",
                 "tidelog_event_loop_lag_seconds_count ", "# TYPE tidelog_requests_total counter"):
        assert name in text, name


def test_without_a_port_the_service_keeps_metrics_but_serves_nothing() -> None:
    from tidelog.observability.service import ObservabilityService

    async def main() -> ObservabilityService:
        service = ObservabilityService(port=None)
        await service.start()
        service.metrics.produced("t", 10, 1)
        await service.stop()
        return service

    service = asyncio.run(main())
    assert service.port is None
    assert 'tidelog_topic_messages_in_total{topic="t"} 1' in service.registry.render()
