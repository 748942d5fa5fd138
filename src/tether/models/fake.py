"""The scripted fake model: same protocol and code path as a real adapter, driven by `Reply` objects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tether.contracts.messages import ChatRequest, RawPart
from tether.contracts.prices import Price
from tether.contracts.signal import Signal
from tether.contracts.stream import (
    ChatEvent,
    ErrorKind,
    Finish,
    FinishReason,
    ModelCaps,
    RawPartEvent,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageDelta,
)
from tether.contracts.usage import Usage
from tether.journal.canonical import canonical_json, to_jsonable


@dataclass(frozen=True)
class ToolCall:
    """A tool call the fake model makes."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """One scripted model turn. Token counts default to a rough chars/4 estimate."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Reasoning tokens, a part of `output_tokens` (added to the estimate when that is not given)."""
    finish_reason: FinishReason | None = None
    latency_s: float = 0.0
    chunks: int | None = None
    error: ErrorKind | None = None
    retry_after_ms: int | None = None
    message: str | None = None
    raw: Sequence[dict[str, Any]] = ()
    output: Any = None
    """A structured answer (a dict, a list, a pydantic model): sent the way the request asks for one,
    as an `emit_result` call under the forced-tool tier, else as JSON text."""


Script = Sequence[Reply] | Callable[[ChatRequest], Reply]


def estimate_tokens(request: ChatRequest) -> int:
    """A deterministic input-size guess (chars/4) used when a reply does not state its input."""
    size = sum(len(canonical_json(m)) for m in request.messages)
    size += sum(len(canonical_json(t)) for t in request.tools)
    return max(1, size // 4)


class FakeModel:
    """A scripted adapter. Models are `"<id>:<any name>"`; `requests` records every request.

    `prices` prices models by name; `price` prices every model `prices` does not name (else it is unpriced).
    """

    def __init__(
        self,
        id: str = "fake",
        script: Script = (),
        *,
        prices: Mapping[str, Price] | None = None,
        price: Price | None = None,
        family: str | None = None,
        context_window: int = 200_000,
        max_output_tokens: int = 8_192,
        output_floor: int = 1,
        structured_output: Literal["native", "tool", "prompt"] = "tool",
    ) -> None:
        self.id = id
        self.family = family or id
        self._script_fn: Callable[[ChatRequest], Reply] | None = None
        self._script: list[Reply] = []
        if callable(script):
            self._script_fn = script
        else:
            self._script = list(script)
        self._prices = dict(prices or {})
        self._price = price
        self._caps = {
            "context_window": context_window,
            "max_output_tokens": max_output_tokens,
            "output_floor": output_floor,
            "structured_output": structured_output,
        }
        self.requests: list[ChatRequest] = []
        self._caps_of: dict[str, ModelCaps] = {}

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def remaining(self) -> int:
        """Scripted replies not consumed yet (list scripts only)."""
        return len(self._script)

    def push(self, *replies: Reply) -> None:
        self._script.extend(replies)

    def caps(self, model: str) -> ModelCaps:
        cached = self._caps_of.get(model)
        if cached is None:  # asked several times per turn; ModelCaps is frozen, so one per model serves
            cached = self._caps_of[model] = ModelCaps(price=self._prices.get(model, self._price), **self._caps)
        return cached

    def _next(self, request: ChatRequest) -> Reply | None:
        if self._script_fn is not None:
            return self._script_fn(request)
        return self._script.pop(0) if self._script else None

    async def stream(
        self, request: ChatRequest, signal: Signal | None = None
    ) -> AsyncIterator[ChatEvent]:
        # One generator, not one wrapping another: every event would cross two generator frames.
        self.requests.append(request)
        reply = self._next(request)
        if reply is None:
            yield StreamError(kind="terminal", message="fake model script exhausted")
            return
        reply = structured(reply, request)
        if reply.error is not None:
            if await _sleep(reply.latency_s, signal):
                yield Finish(reason="cancelled", usage=Usage(approximate=True))
                return
            retryable = reply.error in ("transport", "rate-limit")
            yield StreamError(
                kind=reply.error,
                message=reply.message or f"fake {reply.error} error",
                retryable=retryable,
                retry_after_ms=reply.retry_after_ms,
                status=429 if reply.error == "rate-limit" else None,
            )
            return
        input_tokens = reply.input_tokens if reply.input_tokens is not None else estimate_tokens(request)
        text = reply.text
        reasoning = reply.reasoning_tokens
        estimate = max(1, len(text) // 4) + reasoning
        out = reply.output_tokens if reply.output_tokens is not None else estimate
        tool_calls = list(reply.tool_calls)
        reason: FinishReason = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        cap = request.max_output_tokens
        if cap is not None and out > cap:
            # Like a provider: never more output than asked for; the cut drops unfinished tool calls.
            text = text[: max(0, len(text) * cap // max(out, 1))]
            out, tool_calls, reason = cap, [], "max_tokens"
        reasoning = min(reasoning, out)
        inputs = {"input_tokens": input_tokens, "cache_read_tokens": reply.cache_read_tokens,
                  "cache_write_tokens": reply.cache_write_tokens}
        total = _usage({**inputs, "output_tokens": out, "reasoning_tokens": reasoning})
        chunks = max(1, reply.chunks or 1)
        if reply.chunks:
            yield UsageDelta(usage=_usage(inputs))
        sent_out = 0
        for i in range(chunks):
            if await _sleep(reply.latency_s / chunks, signal):
                yield Finish(reason="cancelled", usage=_usage({**inputs, "output_tokens": sent_out}, approximate=True))
                return
            piece = text[len(text) * i // chunks : len(text) * (i + 1) // chunks]
            if piece:
                yield TextDelta(text=piece)
            if reply.chunks:
                share = out * (i + 1) // chunks - sent_out
                thought = reasoning if i == chunks - 1 else 0  # so the running reasoning never exceeds output
                sent_out += share
                if share or thought:
                    yield UsageDelta(usage=Usage(output_tokens=share, reasoning_tokens=thought))
        for raw in reply.raw:
            yield RawPartEvent(part=RawPart(family=self.family, data=dict(raw)))
        for index, call in enumerate(tool_calls):
            wire_id = f"fc_{index}"
            yield ToolCallStart(index=index, wire_id=wire_id, name=call.name)
            yield ToolCallDelta(index=index, args_delta=canonical_json(call.args).decode())
            yield ToolCallEnd(index=index, wire_id=wire_id, name=call.name, args=dict(call.args))
        if not reply.chunks:
            yield UsageDelta(usage=total)
        yield Finish(reason=reason, usage=total)


def _usage(counts: dict[str, int], approximate: bool = False) -> Usage:
    """A `Usage` of the counts that are not zero (as `Usage.__add__` builds one: a smaller `model_fields_set`)."""
    fields = {name: n for name, n in counts.items() if n}
    return Usage(**fields, approximate=True) if approximate else Usage(**fields)


async def _sleep(seconds: float, signal: Signal | None) -> bool:
    """Sleep; True when the signal fired first."""
    if seconds <= 0:
        await asyncio.sleep(0)
        return bool(signal and signal.aborted)
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    # A timer and a signal listener on one future: no task per call, and leaving is O(1) however
    # many calls are in flight (an asyncio.Event waiter would be removed from a shared deque).
    loop = asyncio.get_running_loop()
    woke: asyncio.Future[bool] = loop.create_future()

    def settle(fired: bool) -> None:
        if not woke.done():
            woke.set_result(fired)

    timer = loop.call_later(seconds, settle, False)
    off = signal.add_listener(lambda _reason: settle(True))
    try:
        return await woke
    finally:
        timer.cancel()
        off()


# The forced-tool tier's tool (tether.agents.structured.EMIT_RESULT; a leaf cannot import it).
EMIT_RESULT = "emit_result"
_WRAP_KEY = "result"


def structured(reply: Reply, request: ChatRequest) -> Reply:
    """`reply` with its `output` put where the request's structured-output tier reads it."""
    if reply.output is None:
        return reply
    value = to_jsonable(reply.output, what="Reply.output")
    emit = next((t for t in request.tools if t.name == EMIT_RESULT), None)
    if emit is None:  # native or prompted JSON: the answer is the text
        return replace(reply, text=json.dumps(value), output=None)
    params = emit.parameters
    wrapped = set(params.get("properties") or {}) == {_WRAP_KEY} and params.get("required") == [_WRAP_KEY]
    if wrapped and not (isinstance(value, dict) and set(value) == {_WRAP_KEY}):
        value = {_WRAP_KEY: value}  # a non-object schema rides under `result`
    args = value if isinstance(value, dict) else {_WRAP_KEY: value}
    return replace(reply, tool_calls=[*reply.tool_calls, ToolCall(EMIT_RESULT, args)], output=None)


def fake(
    id: str = "fake",
    script: Script = (),
    *,
    prices: Mapping[str, Price] | None = None,
    price: Price | None = None,
    family: str | None = None,
    context_window: int = 200_000,
    max_output_tokens: int = 8_192,
    output_floor: int = 1,
    structured_output: Literal["native", "tool", "prompt"] = "tool",
) -> FakeModel:
    """A scripted model for tests: `tether.models.fake("fake", script=[Reply(...)], prices=...)`; `price`
    prices every model `prices` does not name."""
    return FakeModel(
        id, script, prices=prices, price=price, family=family, context_window=context_window,
        max_output_tokens=max_output_tokens, output_floor=output_floor, structured_output=structured_output,
    )
