"""The per-run event stream: typed telemetry events, replayable to late subscribers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from tether.contracts.events import Event


class EventStream:
    """Collects a run's events; `subscribe()` yields all of them (past and future) until the end."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._events: list[Event] = []
        self._closed = False
        self._waiters: set[asyncio.Event] = set()
        self._callbacks: list[tuple[str, Callable[[Event], Any]]] = []

    @property
    def events(self) -> list[Event]:
        return list(self._events)

    def emit(
        self,
        type: str,
        *,
        replayed: bool = False,
        span_id: str | None = None,
        parent_span_id: str | None = None,
        **data: Any,
    ) -> Event:
        event = Event(
            type=type,
            run_id=self.run_id,
            seq=len(self._events) + 1,
            ts=time.time(),
            span_id=span_id,
            parent_span_id=parent_span_id,
            replayed=replayed,
            data=data,
        )
        self._events.append(event)
        for pattern, cb in list(self._callbacks):
            if pattern in ("*", type) or (pattern.endswith(":*") and type.startswith(pattern[:-1])):
                with contextlib.suppress(Exception):  # a telemetry callback never breaks a run
                    cb(event)
        self._notify()
        return event

    def _notify(self) -> None:
        for waiter in self._waiters:
            waiter.set()

    def on(self, type: str, callback: Callable[[Event], Any]) -> None:
        """Call `callback(event)` for each future event of `type` (`"*"` or `"agent:*"` patterns)."""
        self._callbacks.append((type, callback))

    def close(self) -> None:
        self._closed = True
        self._notify()

    async def subscribe(self) -> AsyncIterator[Event]:
        i = 0
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            while True:
                while i < len(self._events):
                    yield self._events[i]
                    i += 1
                if self._closed:
                    return
                waiter.clear()
                if i >= len(self._events) and not self._closed:
                    await waiter.wait()
        finally:
            self._waiters.discard(waiter)
