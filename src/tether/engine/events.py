"""The per-run event stream: the single emission point of typed telemetry events, replayable to late subscribers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from tether.contracts.events import BaseEvent, Event, EventLayout, matches
from tether.contracts.usage import Usage
from tether.engine.frame import CURRENT_FRAME

E = TypeVar("E", bound=BaseEvent)


class EventSink(Protocol):
    """Receives every event of the runs it is attached to (the event log, the OpenTelemetry exporter)."""

    def emit(self, event: Event) -> None:
        """Called synchronously, in the emitting task, for each event in order."""

    def close_run(self, run_id: str) -> None:
        """The run's stream closed: no more events of `run_id` follow."""


class EventStream:
    """Collects a run's events; `subscribe()` yields all of them (past and future) until the end."""

    def __init__(self, run_id: str, sinks: Sequence[EventSink] = ()) -> None:
        self.run_id = run_id
        self._events: list[tuple[Any, ...]] = []
        """Kept events as `(class index, *slot values)`: a tuple of atomic values is one the cycle collector
        untracks, so what a long run keeps per completed agent adds (near) nothing to each full collection."""
        self._classes: list[tuple[type[BaseEvent], EventLayout]] = []
        self._class_index: dict[type[BaseEvent], int] = {}
        self._usage_mark = object()  # untracked by the collector, unlike a class
        self._closed = False
        self._waiters: set[asyncio.Event] = set()
        self._callbacks: list[tuple[str | type[BaseEvent], Callable[[Any], Any]]] = []
        self._sinks = list(sinks)

    @property
    def events(self) -> list[Event]:
        return [self._rebuild(kept) for kept in self._events]

    def _keep(self, event: BaseEvent) -> None:
        cls = type(event)
        index = self._class_index.get(cls)
        if index is None:
            index = self._class_index[cls] = len(self._classes)
            self._classes.append((cls, cls.layout()))
        names, read, usage_at = self._classes[index][1]
        values = read(event) if len(names) > 1 else (read(event),)  # the slots read in one C call
        if usage_at:  # only the fields that may hold a Usage are looked at one by one
            flat = list(values)
            for i in usage_at:
                if type(flat[i]) is Usage:
                    flat[i] = self._flat(flat[i])
            values = tuple(flat)
        self._events.append((index, *values))

    def _flat(self, value: Usage) -> tuple[Any, ...]:
        # Usage (on every model and agent end) is a pydantic model: a dict and a set besides itself. Kept as
        # `(marker, fields set, *counts)` it is one more tuple of atomic values, which the collector untracks.
        return (self._usage_mark, tuple(sorted(value.model_fields_set)), *value.__dict__.values())

    def _unflat(self, value: Any) -> Any:
        if type(value) is tuple and value and value[0] is self._usage_mark:
            return Usage.model_construct(set(value[1]), **dict(zip(Usage.model_fields, value[2:], strict=True)))
        return value

    def _rebuild(self, kept: tuple[Any, ...]) -> Event:
        cls, (names, _, _) = self._classes[kept[0]]
        event = cls.__new__(cls)
        for name, value in zip(names, kept[1:], strict=True):
            object.__setattr__(event, name, self._unflat(value))
        return cast(Event, event)

    def emit(self, event: E, /) -> E:
        """Take `event` over: fill its envelope (run, seq, time; the current span when none is set), keep it and
        deliver it. An event is emitted once; emitting one already emitted is an error."""
        if event.seq:
            raise ValueError(f"{event.type} event #{event.seq} of run {event.run_id!r} was emitted already")
        event.run_id = self.run_id
        event.seq = len(self._events) + 1
        event.ts = time.time()
        if event.span_id is None:
            frame = CURRENT_FRAME.get(None)
            event.span_id = frame.span_id if frame is not None else "run"
        self._keep(event)
        self._deliver(cast(Event, event))
        return event

    def _deliver(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink.emit(event)
            except Exception:  # telemetry never breaks a run
                logging.getLogger("tether").exception("event sink %r failed on %s", sink, event.type)
        for pattern, cb in list(self._callbacks):
            if _selects(pattern, event):
                try:
                    cb(event)
                except Exception:
                    logging.getLogger("tether").exception("event callback failed on %s", event.type)
        for waiter in self._waiters:
            waiter.set()

    def on(self, type: str | type[E], callback: Callable[[E], Any]) -> None:
        """Call `callback(event)` for each future event of `type`: a type string (`"*"` and `"agent:*"`
        patterns work) or an event class (`AgentEnd`, or `BaseEvent` for all)."""
        self._callbacks.append((type, callback))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sink in self._sinks:
            try:
                sink.close_run(self.run_id)
            except Exception:
                logging.getLogger("tether").exception("event sink %r failed to close", sink)
        for waiter in self._waiters:
            waiter.set()

    async def subscribe(self) -> AsyncIterator[Event]:
        i = 0
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            while True:
                while i < len(self._events):
                    yield self._rebuild(self._events[i])
                    i += 1
                if self._closed:
                    return
                waiter.clear()
                if i >= len(self._events) and not self._closed:
                    await waiter.wait()
        finally:
            self._waiters.discard(waiter)


def _selects(pattern: str | type[BaseEvent], event: BaseEvent) -> bool:
    if isinstance(pattern, str):
        return matches(pattern, event.type)
    return isinstance(event, pattern)
