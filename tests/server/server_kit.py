"""Helpers the server tests share: polling with generous timeouts, a small SSE parser, uvicorn in a thread."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.testclient import TestClient
from starlette.types import ASGIApp

PROGRAM = {"Content-Type": "application/json", "X-Tether-Request": "1"}
"""What a program calling the API sends with a state-changing request."""


def wait_for(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll until `predicate()` is truthy (generous: the machine is shared)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_status(client: TestClient, run_id: str) -> str:
    status: str = client.get(f"/api/runs/{run_id}").json()["status"]
    return status


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event, data) pairs of an SSE body."""
    out = []
    for frame in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in frame.splitlines():
            if line.startswith(":") or ": " not in line:
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if "data" in fields:
            out.append((fields.get("event", "message"), fields["data"]))
    return out


@contextlib.contextmanager
def uvicorn_thread(app: ASGIApp) -> Iterator[str]:
    """Serve `app` with uvicorn on a free 127.0.0.1 port in a thread; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(30)
        sock.close()


def http(url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON body) of a GET, or of a POST of `body` as a program sends it."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={**(PROGRAM if data is not None else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
