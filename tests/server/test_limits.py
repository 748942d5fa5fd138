"""Request bodies and event streams are bounded: uvicorn on a free port, spoken to over raw sockets.

The whole-process view (a 300 MB body against `tether serve` does not grow it) is in test_serve_cli.py.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_apps import make_engine
from server_kit import http, uvicorn_thread, wait_for

from tether.server import create_app

LIMIT = 64_000


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    app = create_app(make_engine(f"sqlite:///{tmp_path}/tether.db"), owns_engine=True, max_body_bytes=LIMIT,
                     max_streams=2)
    with uvicorn_thread(app) as url:
        yield url


def connect(base: str) -> socket.socket:
    parts = urllib.parse.urlsplit(base)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    return sock


def head(path: str, *extra: str, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             "X-Tether-Request: 1", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection. A server that hangs up on a body it never read
    resets the connection (RST, not FIN) once its answer is out: that ends the answer too."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def status_and_error(raw: bytes) -> tuple[int, str, dict[str, object]]:
    headers, _, body = raw.partition(b"\r\n\r\n")
    status = int(headers.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in headers.lower():
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    error: dict[str, object] = json.loads(body)["error"]
    return status, headers.decode("latin-1").lower(), error


def test_a_body_declared_over_the_limit_is_refused_before_it_is_sent(base: str) -> None:
    with connect(base) as sock:
        sock.sendall(head("/api/runs", "Content-Length: 300000000") + b'{"workflow": "echo", ')  # and no more
        status, headers, error = status_and_error(read_all(sock))  # the server answers, and hangs up
    assert status == 413 and "connection: close" in headers
    assert error["code"] == "body-too-large" and error["data"] == {"limit": LIMIT}
    assert "declares 300000000 bytes; this server takes at most 64000 bytes" in str(error["message"])
    assert "--max-body-bytes" in str(error["message"])
    with connect(base) as sock:  # a client that waits for 100-continue never sends the body at all
        sock.sendall(head("/api/runs", "Content-Length: 300000000", "Expect: 100-continue"))
        raw = read_all(sock)
    assert raw.startswith(b"HTTP/1.1 413") and b"100 Continue" not in raw
    assert http(base + "/api/runs")[1]["runs"] == []


def test_a_chunked_body_is_cut_off_where_it_crosses_the_limit(base: str) -> None:
    sent = 0
    chunk = b"x" * 16_384
    stop = threading.Event()

    def pour(sock: socket.socket) -> None:
        nonlocal sent
        try:
            while not stop.is_set() and sent < 300_000_000:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:  # the server hung up: what we want
            pass

    with connect(base) as sock:
        sock.sendall(head("/api/runs/x/resolve", "Transfer-Encoding: chunked"))
        pourer = threading.Thread(target=pour, args=(sock,))
        pourer.start()
        try:
            raw = read_all(sock)
        finally:
            stop.set()
            pourer.join(30)
    status, headers, error = status_and_error(raw)
    assert status == 413 and "connection: close" in headers and error["code"] == "body-too-large"
    assert "passed 64000 bytes" in str(error["message"])
    assert sent < 64 * 1024 * 1024  # the pour stopped at the socket buffers, far short of 300 MB


def test_a_body_under_the_limit_is_served(base: str) -> None:
    padding = "p" * (LIMIT - 200)
    status, started = http(base + "/api/runs", {"workflow": "echo", "run_id": "big", "args": {"pad": padding}})
    assert status == 201, started
    wait_for(lambda: http(base + "/api/runs/big")[1]["status"] == "ok", what="the run to finish")


def open_stream(base: str, run_id: str) -> tuple[socket.socket, bytes]:
    """A raw event-stream connection; (the socket, the response head once it arrived)."""
    sock = connect(base)
    sock.sendall(head(f"/api/runs/{run_id}/events", "Accept: text/event-stream", method="GET"))
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    return sock, got


def test_event_streams_past_the_cap_are_refused_until_one_closes(base: str, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    status, _ = http(base + "/api/runs", {"workflow": "live_panel", "run_id": "live-1",
                                          "args": {"question": "q", "gates": str(gates)}})
    assert status == 201
    first, head1 = open_stream(base, "live-1")
    second, head2 = open_stream(base, "live-1")
    try:
        assert head1.startswith(b"HTTP/1.1 200") and head2.startswith(b"HTTP/1.1 200")
        third, refused = open_stream(base, "live-1")
        third.close()
        assert refused.startswith(b"HTTP/1.1 503") and b"retry-after: 5" in refused.lower()
        status, error = http(base + "/api/runs/live-1/events")
        assert status == 503 and error["error"]["code"] == "too-many-streams"
        assert error["error"]["data"] == {"open": 2, "cap": 2}
        assert "--max-streams" in error["error"]["message"]
        assert http(base + "/api/runs/live-1")[0] == 200  # only streams are capped
        first.close()  # a client going away frees its slot

        def reopened() -> socket.socket | None:
            sock, got = open_stream(base, "live-1")
            if got.startswith(b"HTTP/1.1 200"):
                return sock
            sock.close()
            return None

        wait_for(reopened, what="a freed stream slot").close()
    finally:
        first.close()
        second.close()
        http(base + "/api/runs/live-1/cancel", {"reason": "test over"})
