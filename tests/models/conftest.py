"""Wire fixtures: recorded vendor bodies served to the real SDK clients by a mock transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

WIRE = Path(__file__).resolve().parent.parent / "fixtures" / "wire"

Reply = httpx2.Response | Callable[[httpx2.Request], httpx2.Response] | BaseException


class Wire:
    """A mock HTTP server: answers queued replies in order and keeps every request it got."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"unexpected request to {request.url}")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply(request) if callable(reply) else reply

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    @property
    def body(self) -> dict[str, Any]:
        assert len(self.requests) == 1, f"expected one request, got {len(self.requests)}"
        return self.bodies[0]


def sse(vendor: str, name: str) -> httpx2.Response:
    """A 200 event-stream response with a recorded body from tests/fixtures/wire/<vendor>/."""
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=(WIRE / vendor / name).read_bytes(),
    )


def error(vendor: str, name: str, status: int, **headers: str) -> httpx2.Response:
    """An HTTP error response with a recorded JSON error body."""
    return httpx2.Response(
        status,
        headers={"content-type": "application/json", **headers},
        content=(WIRE / vendor / name).read_bytes(),
    )


def stalled_sse(vendor: str, name: str, release: asyncio.Event) -> httpx2.Response:
    """Streams a recorded body, then hangs (until `release`) as a slow provider would."""

    async def body() -> AsyncIterator[bytes]:
        yield (WIRE / vendor / name).read_bytes()
        await release.wait()

    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())


class Kit:
    """What the adapter tests use: `kit.wire(...)`, `kit.sse(...)`, `kit.error(...)`."""

    sse = staticmethod(sse)
    error = staticmethod(error)
    stalled_sse = staticmethod(stalled_sse)

    @staticmethod
    def wire(*replies: Reply) -> Wire:
        return Wire(*replies)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
