"""Helpers the server tests share: polling with generous timeouts and a small SSE parser."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starlette.testclient import TestClient


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
