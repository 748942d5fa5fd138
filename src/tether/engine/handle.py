"""`RunHandle`: a started run you can await, watch, cancel and feed external values."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from tether.contracts.errors import InvalidResolutionError, RunHandedBackError
from tether.contracts.events import BaseEvent, Event, LogLine
from tether.engine.events import EventStream
from tether.engine.outcome import RunOutcome

if TYPE_CHECKING:
    from tether.engine.segment import Segment

E = TypeVar("E", bound=BaseEvent)

SegmentObserver = Callable[["Segment"], None]
"""Told the `Segment` that drives a run once it is wired, before the body runs (`RunHandle.observe`)."""


class RunHandle:
    """Returned by `engine.start(...)` at once; `await handle` gives the `RunOutcome`."""

    def __init__(
        self, run_id: str, events: EventStream, resolve_settled: Callable[[str, str, Any], Awaitable[bool]]
    ) -> None:
        self.run_id = run_id
        self._resolve_settled = resolve_settled  # `engine.resolve_external`, for a run that already settled
        self._events = events
        self._task: asyncio.Task[RunOutcome] | None = None
        self._segment: Segment | None = None
        self._cancel_reason: str | None = None
        self._hand_back: RunHandedBackError | None = None
        self._early: list[tuple[str, Any]] = []
        self._observers: list[SegmentObserver] = []

    def _bind(self, task: asyncio.Task[RunOutcome]) -> None:
        self._task = task

    def _attach(self, segment: Segment) -> None:
        self._segment = segment
        if self._cancel_reason is not None:
            segment.cancel.abort(self._cancel_reason)
        if self._hand_back is not None:
            segment.hand_back(self._hand_back)
        for key, value in self._early:
            segment.waits.later(_resolve_early(segment, key, value))
        for observer in self._observers:
            observer(segment)

    def observe(self, observer: SegmentObserver) -> None:
        """Call `observer(segment)` when a segment starts driving this run (at once if one already does).

        The engine's seam for code that reads what a run matched and wrote (a fork preview, a test
        harness) without subclassing the handle; the `Segment` is engine-internal, not a stable API.
        """
        self._observers.append(observer)
        if self._segment is not None:
            observer(self._segment)

    async def result(self) -> RunOutcome:
        assert self._task is not None
        return await asyncio.shield(self._task)

    def __await__(self) -> Generator[Any, None, RunOutcome]:
        return self.result().__await__()

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    @property
    def events(self) -> AsyncIterator[Event]:
        """All events of the run as typed models (`tether.events`), from the start, until `run:end`."""
        return self._events.subscribe()

    def on(self, type: str | type[E], callback: Callable[[E], Any]) -> None:
        """Call `callback(event)` for every future event of `type`: a type string (`"agent:end"`; the
        `"*"` and `"agent:*"` patterns work too) or an event class (`tether.events.AgentEnd`)."""
        self._events.on(type, callback)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: branches are cancelled, the run settles `cancelled`."""
        self._cancel_reason = reason
        if self._segment is not None:
            self._segment.cancel.abort(reason)

    def hand_back(self, reason: str = "handed back") -> None:
        """Stop driving this run without settling it: in-flight calls are cut and journaled, the lease is
        released, and awaiting the handle raises `RunHandedBackError`. Another driver resumes it at once
        (a `tether worker` shutting down re-queues it). A run that already settled is left as it is."""
        if self.done:
            return
        self._hand_back = RunHandedBackError(
            f"handed back: this driver stopped run '{self.run_id}' unsettled ({reason}); its lease is released "
            f"and its completed calls are journaled. Resume it (a worker does) to continue from there.",
            run_id=self.run_id,
            reason=reason,
        )
        if self._segment is not None:
            self._segment.hand_back(self._hand_back)

    async def resolve_external(self, key: str, value: Any) -> bool:
        """Resolve a suspension of this run (live, or durably once settled); False if already closed.

        A value that does not match the suspension's schema raises `InvalidResolutionError` and
        journals nothing. Before the run has started, the value is queued (True) and checked then.
        """
        if self._segment is None:
            self._early.append((key, value))
            return True
        if self.done:
            return await self._resolve_settled(self.run_id, key, value)
        return await self._segment.waits.resolve(key, value)


async def _resolve_early(segment: Segment, key: str, value: Any) -> None:
    """A value queued before the run started: checked like any other; a refusal becomes an event."""
    try:
        closed = await segment.waits.resolve(key, value)
    except InvalidResolutionError as exc:
        segment.events.emit(LogLine(level="error", msg=exc.message, fields={"key": key}))
        return
    if not closed:
        segment.events.emit(LogLine(
            level="warning", fields={"key": key},
            msg=f"no open suspension {key!r} when the run started, so the value given before it was dropped; "
                f"resolve it once the run waits for it (outcome.pending lists the keys)",
        ))
