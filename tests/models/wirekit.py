"""Wire fixtures: recorded vendor bodies served to the real SDK clients by a mock transport."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from aiohttp import web
from aiohttp.test_utils import TestServer

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


# --- a real loopback server: the SDK builds its own HTTP client and connects over a socket --------------


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _aws_header(name: str, value: str) -> bytes:
    key, val = name.encode(), value.encode()
    return struct.pack("B", len(key)) + key + b"\x07" + struct.pack(">H", len(val)) + val


def aws_frame(headers: dict[str, str], payload: dict[str, Any]) -> bytes:
    """One AWS event-stream message: prelude (lengths, CRC), string headers, JSON payload, message CRC."""
    head = b"".join(_aws_header(k, v) for k, v in headers.items())
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    prelude = struct.pack(">II", 16 + len(head) + len(body), len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + body
    return message + struct.pack(">I", zlib.crc32(message))


def aws_frames(name: str) -> list[bytes]:
    """A Bedrock fixture as the frames ConverseStream sends: JSON lines encoded, or a recorded body as it is."""
    path = WIRE / "bedrock" / name
    if not name.endswith(".jsonl"):
        return [path.read_bytes()]
    frames = []
    for line in (json.loads(text) for text in path.read_text().splitlines() if text):
        kind = "exception" if "exception" in line else "event"
        headers = {f":{kind}-type": line[kind], ":content-type": "application/json", ":message-type": kind}
        frames.append(aws_frame(headers, line["data"]))
    return frames


def sse_events(vendor: str, name: str) -> list[bytes]:
    """A recorded event-stream body cut after each blank line: one write per event, as a provider streams."""
    return [part for part in re.split(rb"(?<=\n\n)", (WIRE / vendor / name).read_bytes()) if part]


class Loopback:
    """An HTTP server on 127.0.0.1 that answers queued replies in order and keeps every request it got."""

    def __init__(self, *replies: Handler) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")

    async def __aenter__(self) -> Loopback:
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append({"path": request.path, "body": json.loads(raw) if raw else None})
        if not self.replies:
            return web.json_response({"error": {"message": f"unexpected request to {request.path}"}}, status=418)
        return await self.replies.pop(0)(request)


def stream_of(chunks: list[bytes], content_type: str) -> Handler:
    """A 200 streamed in `chunks`, one write each."""

    async def reply(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": content_type})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
        return response

    return reply


def json_error(vendor: str, name: str, status: int, headers: dict[str, str]) -> Handler:
    """An HTTP error whose body is a recorded JSON error body."""

    async def reply(request: web.Request) -> web.StreamResponse:
        body = (WIRE / vendor / name).read_bytes()
        return web.Response(status=status, body=body, headers={"content-type": "application/json", **headers})

    return reply
