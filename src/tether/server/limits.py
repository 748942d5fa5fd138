"""Bounds on what one client can make the server hold: a request body's size, and open event streams."""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping

from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.contracts.errors import ConfigError
from tether.server.routing import ApiError, error_response

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""1 MiB: far above any resolve or start body a person writes; a bigger one is refused with 413."""
DEFAULT_MAX_STREAMS = 32
"""Concurrent `/events` streams per server (each inspector tab on a run holds one)."""


def check_limits(**limits: int) -> None:
    """Refuse a limit below 1 (`max_body_bytes=0` would refuse every body, `max_streams=0` every stream)."""
    for name, value in limits.items():
        if value < 1:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{name} must be at least 1 (got {value}); pass {flag} N with N >= 1", **{name: value})


_CLOSE = {"Connection": "close"}  # the rest of a refused body is never read, so the connection cannot be reused


class BodyTooLarge(Exception):
    """Raised from `receive` once a body passes the limit; `BodyLimit` answers 413 for it."""


def _too_large(limit: int, got: int, declared: bool) -> ApiError:
    size = f"declares {got} bytes" if declared else f"passed {limit} bytes"
    return ApiError(413, "body-too-large", f"the request body {size}; this server takes at most {limit} bytes. "
                    f"Send a smaller body, or start tether serve with --max-body-bytes N", limit=limit)


class BodyLimit:
    """ASGI middleware: a body over `max_bytes` is refused with 413 as soon as that is known.

    A declared `Content-Length` over the limit is refused before a byte of the body is read; a chunked
    body is cut off at the chunk that crosses the limit, so at most `max_bytes` are ever held.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(_too_large(self.max_bytes, int(declared), True), headers=_CLOSE)(scope, receive, send)
            return
        seen = 0
        started = False

        async def bounded_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await error_response(_too_large(self.max_bytes, seen, False), headers=_CLOSE)(scope, receive, send)


class StreamSlots:
    """At most `cap` event streams at once; a slot is held exactly while its response is being sent."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open = 0

    def response(self, content: AsyncIterable[str], headers: Mapping[str, str]) -> StreamingResponse:
        return _SlotStream(self, content, headers)


class _SlotStream(StreamingResponse):
    """A `text/event-stream` that takes a slot when it starts (503 when none is free) and frees it when the
    stream ends or the client goes away."""

    def __init__(self, slots: StreamSlots, content: AsyncIterable[str], headers: Mapping[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        slots = self.slots
        if slots.open >= slots.cap:  # no await between the check and the count: one event loop, no race
            err = ApiError(503, "too-many-streams", f"this server already serves {slots.open} event streams, its "
                           f"cap; close one (each inspector tab on a run holds one) and retry, or start tether "
                           f"serve with --max-streams N", open=slots.open, cap=slots.cap)
            await error_response(err, headers={"Retry-After": "5"})(scope, receive, send)
            return
        slots.open += 1
        try:
            await super().__call__(scope, receive, send)
        finally:
            slots.open -= 1
