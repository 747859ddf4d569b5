"""The two ASGI servers behind ``tidelog.web.server.serve``, over a real socket: same answers, a
graceful stop on the event, a port already taken refused before serving, and uvicorn's listening
socket without Nagle's algorithm."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.observability.registry import Registry
from tidelog.web.app import create_app
from tidelog.web.server import ListenerConfig, _bound_socket, serve


async def echo(request: Request) -> Response:
    return JSONResponse({"body": len(await request.body()), "client": request.client.host if request.client else ""})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def exercise(listener: ListenerConfig) -> tuple[list[int], dict[str, object]]:
    app = create_app([Route("/echo", echo, methods=["POST"])], registry=Registry())
    stop = asyncio.Event()
    server = asyncio.create_task(serve(app, listener, stop))
    async with httpx.AsyncClient(base_url=listener.url, timeout=10) as http:
        for _ in range(100):
            try:
                await http.get("/healthz")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
        statuses = []
        for _ in range(5):  # one keep-alive connection
            answer = await http.post("/echo", content=b"x" * 100_000)
            statuses.append(answer.status_code)
        body = answer.json()
    stop.set()
    await asyncio.wait_for(server, 10)
    return statuses, body


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
def test_both_servers_answer_the_same_and_stop_on_the_event(server: str) -> None:
    listener = ListenerConfig("127.0.0.1", free_port(), server=server)
    assert listener.server_name == server
    statuses, body = asyncio.run(exercise(listener))
    assert statuses == [200] * 5
    assert body == {"body": 100_000, "client": "127.0.0.1"}


def test_auto_is_uvicorn_without_tls_and_hypercorn_with_it() -> None:
    assert ListenerConfig().server_name == "uvicorn"
    tls = ListenerConfig(certfile=Path("cert.pem"), keyfile=Path("key.pem"))
    assert tls.server_name == "hypercorn"
    with pytest.raises(ValueError, match="must be one of auto, uvicorn, hypercorn"):
        ListenerConfig(server="gunicorn")


def test_a_taken_port_is_refused_before_serving() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = int(taken.getsockname()[1])
        app = create_app([], registry=Registry())
        with pytest.raises(OSError):
            asyncio.run(serve(app, ListenerConfig("127.0.0.1", port, server="uvicorn"), asyncio.Event()))


def test_uvicorns_listening_socket_has_no_delay_for_the_connections_it_accepts() -> None:
    """Accepted connections inherit TCP_NODELAY (Linux): without it a keep-alive response's body
    (a second write after its head) waits 40 ms for the client's delayed ACK."""
    sock = _bound_socket(ListenerConfig("127.0.0.1", 0))
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        client = socket.create_connection(sock.getsockname()[:2])
        sock.setblocking(True)
        accepted, _ = sock.accept()
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        accepted.close()
        client.close()
    finally:
        sock.close()
