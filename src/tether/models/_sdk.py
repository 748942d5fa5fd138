"""What the SDK adapters share: error classes, usage meter, tool-call buffers, caps, streaming."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether.contracts.signal import Signal
from tether.contracts.stream import (
    TERMINAL_EVENT_TYPES,
    ChatEvent,
    Finish,
    ModelCaps,
    StreamError,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageDelta,
)
from tether.contracts.usage import Usage
from tether.pricing import bundled_model_info, bundled_price

CapsOverride = ModelCaps | Mapping[str, ModelCaps] | None
Structured = Literal["native", "tool", "prompt"]

_SECRET = re.compile(r"\bsk-(?:ant-)?[A-Za-z0-9][A-Za-z0-9_\-*]{5,}")
_CONTEXT_HINTS = (
    *("context window", "context length", "context_length_exceeded", "maximum context"),
    *("prompt is too long", "too many tokens", "input is too long"),
)
_BILLING_HINTS = (
    *("insufficient_quota", "exceeded your current quota", "credit balance", "billing"),
    *("payment required", "out of credits"),
)
# Error `type`/`code` values of bodies and mid-stream error events -> the HTTP status they mean.
_STATUS_OF_TYPE = (
    (("overloaded_error",), 529),
    (("api_error", "server_error", "internal_error"), 500),
    (("timeout_error",), 504),
    (("rate_limit_error", "rate_limit_exceeded", "requests", "tokens"), 429),
    (("billing_error", "insufficient_quota"), 402),
    (("authentication_error", "invalid_api_key"), 401),
    (("permission_error",), 403),
    (("not_found_error", "model_not_found"), 404),
    (("request_too_large",), 413),
    (("invalid_request_error", "invalid_prompt", "context_length_exceeded"), 400),
)


def redact_secrets(text: str) -> str:
    """Replace anything that looks like an API key (`sk-…`, `sk-ant-…`) with `[redacted]`."""
    return _SECRET.sub("[redacted]", text)


def parse_retry_after(headers: Mapping[str, str] | None) -> int | None:
    """Milliseconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    headers = headers or {}
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        with contextlib.suppress(ValueError, TypeError):
            return max(0, round(float(headers.get(name) or "") * scale))
    with contextlib.suppress(ValueError, TypeError):
        when = email.utils.parsedate_to_datetime(headers.get("retry-after") or "")
        return max(0, round((when.timestamp() - time.time()) * 1000))
    return None


def error_fields(body: object) -> tuple[str | None, str]:
    """(error type or code, message) from any provider error body shape."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            return error_fields(inner)
        kind = body.get("code") or body.get("type")
        if kind == "error":
            kind = None
        message = body.get("message")
        return (str(kind) if kind else None), (str(message) if message else "")
    if isinstance(body, str):
        return None, body
    return None, ""


def _status_of_type(kind: str | None) -> int | None:
    for names, status in _STATUS_OF_TYPE:
        if kind in names:
            return status
    return None


def classify_error(
    provider: str,
    status: int | None,
    *,
    kind: str | None = None,
    message: str = "",
    headers: Mapping[str, str] | None = None,
    key_env: str | None = None,
) -> StreamError:
    """Map an HTTP status / provider error type to the `AgentError` kind and retry class."""
    text = redact_secrets(message.strip()) or "no message"
    hay = f"{kind or ''} {text}".lower()
    if status is None or status < 400:  # a mid-stream error event: its type says what it means
        status = _status_of_type(kind)
    shown = f" ({status})" if status else ""

    def err(k: Any, msg: str, retryable: bool = False, after: int | None = None) -> StreamError:
        return StreamError(
            kind=k, message=msg, retryable=retryable, retry_after_ms=after, status=status
        )

    if any(h in hay for h in _BILLING_HINTS) or status == 402:
        return err(
            "terminal",
            f"{provider} quota or credit exhausted{shown}: {text}. Retrying will not help; "
            f"add credit or raise the quota, or route to another model.",
        )
    if (status in (400, 413, None)) and any(h in hay for h in _CONTEXT_HINTS):
        return err(
            "terminal",
            f"{provider} context window exceeded{shown}: {text}. Shorten the history or the "
            f"tool results, or route to a model with a larger context window.",
        )
    if status in (401, 403):
        hint = f"set {key_env} or pass api_key=" if key_env else "pass a valid api_key="
        return err(
            "terminal",
            f"{provider} rejected the credentials{shown}: {text}. Check the key ({hint}).",
        )
    if status == 429:
        after = parse_retry_after(headers)
        wait = f"; retry after {after} ms" if after is not None else ""
        return err("rate-limit", f"{provider} rate limited{shown}: {text}{wait}", True, after)
    if status is None or status in (408, 409) or status >= 500:
        what = "overloaded" if status == 529 else "transport error"
        return err(
            "transport", f"{provider} {what}{shown}: {text}", True, parse_retry_after(headers)
        )
    return err("terminal", f"{provider} rejected the request{shown}: {text}")


def error_from_exception(
    exc: BaseException,
    provider: str,
    *,
    connection_errors: tuple[type[BaseException], ...] = (),
    key_env: str | None = None,
) -> StreamError:
    """Any exception an SDK (or its HTTP client) raised, as the stream's typed error event."""
    if isinstance(exc, connection_errors) or _is_network_error(exc):
        detail = redact_secrets(str(exc) or type(exc).__name__)
        return StreamError(
            kind="transport",
            message=f"{provider} connection failed: {detail}",
            retryable=True,
        )
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    if hasattr(exc, "body") or isinstance(status, int):
        kind, message = error_fields(body)
        kind = kind or getattr(exc, "code", None) or getattr(exc, "type", None)
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) if response is not None else None
        return classify_error(
            provider,
            status if isinstance(status, int) else None,
            kind=kind if isinstance(kind, str) else None,
            message=message or str(getattr(exc, "message", "") or exc),
            headers=headers,
            key_env=key_env,
        )
    return StreamError(
        kind="terminal",
        message=f"{provider} adapter failed: {type(exc).__name__}: {redact_secrets(str(exc))}",
    )


def _is_network_error(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    try:
        import httpx2
    except ImportError:  # pragma: no cover - every SDK we wrap ships it
        return False
    return isinstance(exc, httpx2.TransportError | httpx2.StreamError)


@dataclass
class UsageMeter:
    """Turns cumulative usage snapshots into the increments the engine meters."""

    total: Usage = field(default_factory=Usage)

    def advance(
        self,
        *,
        input: int | None = None,
        output: int | None = None,
        cache_read: int | None = None,
        cache_write: int | None = None,
    ) -> UsageDelta | None:
        """Record a snapshot (None = unchanged); returns the increment, if any."""
        seen = {
            "input_tokens": input,
            "output_tokens": output,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
        }
        old = self.total
        self.total = old.model_copy(
            update={k: max(getattr(old, k), v or 0) for k, v in seen.items()}
        )
        inc = Usage(**{k: getattr(self.total, k) - getattr(old, k) for k in seen})
        return None if inc == Usage() else UsageDelta(usage=inc)

    def partial(self) -> Usage | None:
        """Usage so far of an unfinished stream (approximate), or None if nothing was seen."""
        if self.total == Usage():
            return None
        return self.total.model_copy(update={"approximate": True})


def parse_args(text: str) -> dict[str, Any] | None:
    """Accumulated tool-call arguments: `{}` for empty input, None when not a JSON object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass
class _Call:
    index: int
    wire_id: str
    name: str
    chunks: list[str] = field(default_factory=list)


@dataclass
class ToolCallBuffer:
    """Tool calls being streamed, keyed by the provider's handle (block index, item id, …).

    Calls get tether indexes 0, 1, … in the order they start. A call whose arguments are not a
    JSON object when it ends is left unfinished (no `ToolCallEnd`), like a call cut by max_tokens.
    """

    calls: dict[Any, _Call] = field(default_factory=dict)
    open: list[Any] = field(default_factory=list)
    ended: int = 0

    def __contains__(self, key: Any) -> bool:
        return key in self.calls

    def start(self, key: Any, wire_id: str, name: str) -> ToolCallStart:
        call = _Call(index=len(self.calls), wire_id=wire_id, name=name)
        self.calls[key] = call
        self.open.append(key)
        return ToolCallStart(index=call.index, wire_id=wire_id, name=name)

    def delta(self, key: Any, text: str) -> ToolCallDelta | None:
        call = self.calls.get(key)
        if call is None or not text:
            return None
        call.chunks.append(text)
        return ToolCallDelta(index=call.index, args_delta=text)

    def end(self, key: Any, full: str | None = None) -> ToolCallEnd | None:
        call = self.calls.get(key)
        if call is None or key not in self.open:
            return None
        self.open.remove(key)
        args = parse_args(full if full is not None else "".join(call.chunks))
        if args is None:
            return None
        self.ended += 1
        return ToolCallEnd(index=call.index, wire_id=call.wire_id, name=call.name, args=args)

    def end_all(self) -> list[ToolCallEnd]:
        ends = [self.end(key) for key in list(self.open)]
        return [e for e in ends if e is not None]


def wire_tool_id(prefix: str, canonical_id: str) -> str:
    """A valid, deterministic wire id for an engine-minted tool-call id (same input, same id)."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", canonical_id)
    if clean != canonical_id or len(clean) > 48:
        digest = hashlib.sha256(canonical_id.encode()).hexdigest()[:10]
        clean = f"{clean[:36]}_{digest}"
    return f"{prefix}{clean}"


def tool_result_text(content: str, is_error: bool) -> str:
    """Tool-result text for wire formats without an error flag."""
    return f"[error] {content}" if is_error else content


@dataclass(frozen=True)
class Traits:
    """What an adapter knows about a model family beyond genai-prices' data."""

    max_output_tokens: int = 8_192
    structured_output: Structured = "tool"
    efforts: tuple[str, ...] = ()
    context_window: int = 128_000


def build_caps(
    adapter: str, provider_id: str | None, model: str, traits: Traits, override: CapsOverride
) -> ModelCaps:
    """Caps for `model`: an override wins; else genai-prices' window and price plus traits."""
    if isinstance(override, ModelCaps):
        return override
    if override is not None and model in override:
        return override[model]
    window = traits.context_window
    info = bundled_model_info(provider_id, model) if provider_id else None
    if info is not None and getattr(info, "context_window", None):
        window = int(info.context_window)
    return ModelCaps(
        context_window=window,
        max_output_tokens=min(traits.max_output_tokens, window),
        structured_output=traits.structured_output,
        efforts=traits.efforts,
        price=bundled_price(adapter, model),
    )


class Translator(Protocol):
    """Turns one provider stream into tether events."""

    meter: UsageMeter

    def feed(self, item: Any) -> Iterable[ChatEvent]: ...
    def at_end(self) -> ChatEvent:
        """The terminal event when the provider stream ended without one."""
        ...


_END = object()  # the provider stream is exhausted
_ABORTED = object()  # the signal fired first


async def _next(it: AsyncIterator[Any]) -> Any:
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return _END


async def _race(aw: Awaitable[Any], waiter: asyncio.Future[Any] | None) -> Any:
    """Await `aw`, or give up with `_ABORTED` when the signal waiter finishes first."""
    if waiter is None:
        return await aw
    task = asyncio.ensure_future(aw)
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait({task})  # let the cancelled SDK call unwind; its outcome no longer matters
    return _ABORTED


async def drive(
    open_stream: Callable[[], Awaitable[AsyncIterator[Any]]],
    translator: Translator,
    signal: Signal | None,
    on_error: Callable[[BaseException], StreamError],
) -> AsyncIterator[ChatEvent]:
    """Run one provider call: exactly one terminal event, SDK exceptions mapped, signal honoured."""
    if signal is not None and signal.aborted:
        yield Finish(reason="cancelled", usage=Usage(approximate=True))
        return
    waiter = asyncio.ensure_future(signal.wait()) if signal is not None else None
    stream: Any = None
    try:
        stream = await _race(open_stream(), waiter)
        if stream is _ABORTED:
            stream = None
            yield Finish(reason="cancelled", usage=Usage(approximate=True))
            return
        while True:
            item = await _race(_next(stream), waiter)
            if item is _ABORTED:
                usage = translator.meter.total.model_copy(update={"approximate": True})
                yield Finish(reason="cancelled", usage=usage)
                return
            if item is _END:
                yield translator.at_end()
                return
            for event in translator.feed(item):
                yield event
                if event.type in TERMINAL_EVENT_TYPES:
                    return
    except Exception as exc:
        error = on_error(exc)
        yield error.model_copy(update={"usage": translator.meter.partial()})
    finally:
        if waiter is not None:
            waiter.cancel()
        if stream is not None and hasattr(stream, "close"):
            with contextlib.suppress(Exception):  # a broken stream must not mask the terminal
                await stream.close()
