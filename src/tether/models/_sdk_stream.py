"""Stream plumbing the SDK adapters share: usage increments, tool-call buffers and `drive`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.contracts.signal import Signal
from tether.contracts.stream import (
    TERMINAL_EVENT_TYPES,
    ChatEvent,
    Finish,
    StreamError,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageDelta,
)
from tether.contracts.usage import Usage

_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


@dataclass
class UsageMeter:
    """Turns cumulative usage snapshots into the increments the engine meters."""

    total: Usage = field(default_factory=Usage)
    reported: bool = False
    """The provider's own final usage report arrived (a later error does not make it approximate)."""

    def advance(
        self,
        *,
        input: int | None = None,
        output: int | None = None,
        cache_read: int | None = None,
        cache_write: int | None = None,
        reasoning: int | None = None,
    ) -> UsageDelta | None:
        """Record a snapshot (None = unchanged); returns the increment, if any."""
        seen = {
            "input_tokens": input,
            "output_tokens": output,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "reasoning_tokens": reasoning,
        }
        old = self.total
        self.total = old.model_copy(
            update={k: max(getattr(old, k), v or 0) for k, v in seen.items()}
        )
        inc = Usage(**{k: getattr(self.total, k) - getattr(old, k) for k in seen})
        return None if inc == Usage() else UsageDelta(usage=inc)

    def revise(self, snapshot: Usage, *, held: frozenset[str]) -> UsageDelta | None:
        """Record a snapshot the provider may still revise down (Gemini's interim counts); returns the increment.

        The counts in `held` are the snapshot's as they stand (the last snapshot wins) and are never
        metered live: the terminal event's total settles them. The others are metered as they grow and
        never fall below what was metered, so a smaller later count is never a credit.
        """
        old = self.total
        counts = {k: getattr(snapshot, k) if k in held else max(getattr(old, k), getattr(snapshot, k)) for k in _COUNTS}
        self.total = Usage(**counts)
        inc = Usage(**{k: counts[k] - getattr(old, k) for k in _COUNTS if k not in held})
        return None if inc.is_empty() else UsageDelta(usage=inc)

    def partial(self) -> Usage | None:
        """Usage so far of an unfinished stream, or None if nothing was seen.

        Approximate unless the provider's final report already arrived: usage that came before an
        error is billed, never dropped.
        """
        if self.total == Usage():
            return None
        return self.total if self.reported else self.total.model_copy(update={"approximate": True})


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
