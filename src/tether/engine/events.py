"""The per-run event stream: the single emission point of typed telemetry events, replayable to late subscribers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast, overload

from tether.contracts.events import BaseEvent, Event, event_of, lean_event, matches
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
        self._events: list[Event | _Kept] = []
        """Every event so far: as emitted, or kept as its field values (`_Shapes.keep`) to be rebuilt when read."""
        self._shapes = _Shapes()
        self._closed = False
        self._waiters: set[asyncio.Event] = set()
        self._callbacks: list[tuple[str | type[BaseEvent], Callable[[Any], Any]]] = []
        self._sinks = list(sinks)

    @property
    def events(self) -> list[Event]:
        return [self._shapes.event(kept) for kept in self._events]

    @overload
    def emit(self, event: E, /) -> E: ...
    @overload
    def emit(self, event: str, /, **fields: Any) -> BaseEvent: ...
    def emit(self, event: BaseEvent | str, /, **fields: Any) -> BaseEvent:
        """Stamp the envelope (run, seq, time; the current span when none is set) and deliver the event.

        `emit(AgentEnd(...))` is the form to use. `emit("agent:end", status=...)` still works: the
        fields are validated into the same model, so an unknown field raises either way.
        """
        if isinstance(event, str):
            event = event_of(event, **fields)
        elif fields:
            raise TypeError("emit(event) takes a built event model and no keyword fields")
        stamp: dict[str, Any] = {"run_id": self.run_id, "seq": len(self._events) + 1, "ts": time.time()}
        if event.span_id is None:
            frame = CURRENT_FRAME.get(None)
            stamp["span_id"] = frame.span_id if frame is not None else "run"
        stamped = cast(Event, stamp_event(event, stamp))
        self._events.append(self._shapes.keep(stamped))
        self._deliver(stamped)
        return stamped

    def emit_fields(self, cls: type[BaseEvent], fields: dict[str, Any], /) -> None:
        """`emit(cls(**fields))` for one of the engine's hot event types (`lean_event`'s), with `fields` taken
        over: with no sink and no callback, nothing sees the event as it is emitted, so the stream keeps
        its values and builds no model (a subscriber gets one, equal, when it reads the event)."""
        fields["run_id"] = self.run_id
        fields["seq"] = len(self._events) + 1
        fields["ts"] = time.time()
        if fields.get("span_id") is None:
            frame = CURRENT_FRAME.get(None)
            fields["span_id"] = frame.span_id if frame is not None else "run"
        if not (self._sinks or self._callbacks):
            state = lean_event.state(cls, fields)
            if state is not None:
                self._events.append(self._shapes.keep_state(cls, state, fields))
                self._notify()
                return
        event = cast(Event, lean_event(cls, **fields))
        self._events.append(self._shapes.keep(event))
        self._deliver(event)

    def _deliver(self, stamped: Event) -> None:
        for sink in self._sinks:
            try:
                sink.emit(stamped)
            except Exception:  # telemetry never breaks a run
                logging.getLogger("tether").exception("event sink %r failed on %s", sink, stamped.type)
        for pattern, cb in list(self._callbacks):
            if _selects(pattern, stamped):
                try:
                    cb(stamped)
                except Exception:
                    logging.getLogger("tether").exception("event callback failed on %s", stamped.type)
        self._notify()

    def _notify(self) -> None:
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
        self._notify()

    async def subscribe(self) -> AsyncIterator[Event]:
        i = 0
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            while True:
                while i < len(self._events):
                    yield self._shapes.event(self._events[i])
                    i += 1
                if self._closed:
                    return
                waiter.clear()
                if i >= len(self._events) and not self._closed:
                    await waiter.wait()
        finally:
            self._waiters.discard(waiter)


# -- how the stream keeps its events -----------------------------------------------------------------
# A run keeps every event it emitted (late subscribers see them all), and a pydantic model holds its
# values in a dict and its explicitly set field names in a set: ~1.5 KB an event, 6 events an agent.
# The stream keeps each event as a pair, (its shape's number, a tuple of its values), a fifth of that,
# and rebuilds an equal model when one is read. A shape is the class, the field names in order and the
# set field names: every event of a type shares a few. The pair holds no class and no set, so once its
# values are plain (most are) the garbage collector stops tracking it, as a run's events are long-lived.
# The callbacks and sinks that see an event as it is emitted get the emitted model itself.

_Kept = tuple[int, tuple[Any, ...]]
"""An event as the stream keeps it: (its shape's number in `_Shapes.shapes`, its field values in order)."""


class _Shapes:
    """One stream's event shapes: (class, field names, set field names), numbered as first seen."""

    __slots__ = ("by_fields", "numbers", "shapes")

    def __init__(self) -> None:
        self.shapes: list[tuple[type[BaseEvent], tuple[str, ...], frozenset[str]]] = []
        self.numbers: dict[tuple[type[BaseEvent], tuple[str, ...], frozenset[str]], int] = {}
        self.by_fields: dict[tuple[type[BaseEvent], frozenset[str]], int] = {}
        """Shape numbers of events kept from their fields (`keep_state`): a class lays its fields out in one order."""

    def keep(self, event: Event) -> Event | _Kept:
        if event.__pydantic_extra__ or event.__pydantic_private__:
            return event  # nothing the envelope declares has either; kept as it is if one ever does
        state = event.__dict__
        shape = (type(event), tuple(state), frozenset(event.__pydantic_fields_set__))
        number = self.numbers.get(shape)
        if number is None:
            number = self.numbers[shape] = len(self.shapes)
            self.shapes.append(shape)
        return number, tuple(state.values())

    def keep_state(self, cls: type[BaseEvent], state: dict[str, Any], fields_set: Iterable[str]) -> _Kept:
        """What `keep` returns for the event whose `__dict__` is `state` and whose fields set are `fields_set`."""
        names = frozenset(fields_set)
        number = self.by_fields.get((cls, names))
        if number is None:
            shape = (cls, tuple(state), names)
            number = self.numbers.get(shape)
            if number is None:
                number = self.numbers[shape] = len(self.shapes)
                self.shapes.append(shape)
            self.by_fields[cls, names] = number
        return number, tuple(state.values())

    def event(self, kept: Event | _Kept) -> Event:
        """The event model back from how the stream keeps it (equal to the one emitted)."""
        if not isinstance(kept, tuple):
            return kept
        cls, names, fields_set = self.shapes[kept[0]]
        event = cls.__new__(cls)
        object.__setattr__(event, "__dict__", dict(zip(names, kept[1], strict=True)))
        object.__setattr__(event, "__pydantic_fields_set__", set(fields_set))
        object.__setattr__(event, "__pydantic_extra__", None)
        object.__setattr__(event, "__pydantic_private__", None)
        return cast(Event, event)


def stamp_event(event: E, update: dict[str, Any]) -> E:
    """`event` with `update` applied: in place while no stream has stamped it yet, else a copy.

    Emitters hand over a freshly built event and never touch it again, so filling it in place spares
    a copy per event (two with the agent host's stamp): at 10,000 agents in flight every copy adds
    up. An event that was already emitted somewhere (`seq` set) is copied, as before.
    """
    if event.seq:
        return event.model_copy(update=update)
    event.__dict__.update(update)
    event.__pydantic_fields_set__.update(update)
    return event


def _selects(pattern: str | type[BaseEvent], event: BaseEvent) -> bool:
    if isinstance(pattern, str):
        return matches(pattern, event.type)
    return isinstance(event, pattern)
