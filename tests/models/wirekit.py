"""Wire fixtures: recorded vendor bodies served to the real SDK clients by a mock transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2

from tether.contracts import (
    ChatModel,
    ChatRequest,
    Message,
    RawPart,
    Signal,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    Usage,
    UsageDelta,
)

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


async def run(model: ChatModel, request: ChatRequest, signal: Signal | None = None) -> list[Any]:
    """Every event one `stream` call yields."""
    return [event async for event in model.stream(request, signal)]


def terminal(events: list[Any]) -> Any:
    """The one terminal event, which must also be the last."""
    ends = [e for e in events if e.type in ("finish", "error")]
    assert len(ends) == 1 and events[-1] is ends[0], events
    return ends[0]


def summed(events: list[Any]) -> Usage:
    total = Usage()
    for e in events:
        if isinstance(e, UsageDelta):
            total = total + e.usage
    return total


def asker(model: str, max_output_tokens: int) -> Callable[..., ChatRequest]:
    """`ask(text="Hi", **fields)` for `model`: one user message unless `messages=` is given."""

    def ask(text: str = "Hi", **fields: Any) -> ChatRequest:
        fields.setdefault("model", model)
        fields.setdefault("max_output_tokens", max_output_tokens)
        fields.setdefault("messages", (Message.text("user", text),))
        return ChatRequest(**fields)

    return ask


BRIEF = (Message.text("system", "Be brief."), Message.text("user", "Hi"))
WEATHER = ToolSpec(name="get_weather", description="Weather.", parameters={"type": "object"})


def weather_turns(*raw: RawPart, result: str = "boom", is_error: bool = True) -> tuple[Message, Message]:
    """An assistant turn (`raw` parts, text, a `get_weather` call `call_3_0`) and its tool result."""
    call = ToolCallPart(id="call_3_0", name="get_weather", args={"city": "Paris"})
    assistant = Message(role="assistant", parts=(*raw, TextPart(text="Checking."), call))
    outcome = ToolResultPart(call_id="call_3_0", name="get_weather", content=result, is_error=is_error)
    return assistant, Message(role="tool", parts=(outcome,))
