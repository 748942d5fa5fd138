"""Run events over Server-Sent Events: live from a handle, or derived from the journal of a run driven elsewhere."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from pydantic_core import PydanticSerializationError

from tether.contracts.entries import JournalEntry, RunStatus
from tether.contracts.events import Event, EventType
from tether.contracts.protocols import JournalStore
from tether.engine.handle import RunHandle
from tether.server.models import StreamEnd

HEARTBEAT = ": keep-alive\n\n"


def event_json(event: Event) -> str:
    """The one place an event becomes JSON (so typed per-type event models are a one-line change).

    A payload value JSON cannot hold (telemetry may carry any object) is sent as its repr.
    """
    try:
        return event.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(event.model_dump(), default=repr)


def sse_frame(event: Event) -> str:
    return f"id: {event.seq}\nevent: {event.type}\ndata: {event_json(event)}\n\n"


def end_frame(run_id: str, status: RunStatus | None) -> str:
    """Sent last on every stream (`event: end`): the run settled; clients close instead of reconnecting."""
    return f"event: end\ndata: {StreamEnd(run_id=run_id, status=status).model_dump_json()}\n\n"


class JournalFollower:
    """Turns journal entries into the lifecycle events a live run would have emitted for them.

    Deterministic: the same journal always yields the same events with the same `seq`, so a
    reconnecting client's `Last-Event-ID` can skip what it has already seen.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.seq = 0
        self.spent = 0.0
        self.ceiling: float | None = None
        self.depth: dict[int, int] = {}

    def feed(self, entries: Iterable[JournalEntry]) -> list[Event]:
        out: list[Event] = []
        for e in entries:
            out.extend(self._derive(e))
        return out

    def _event(self, type: EventType, e: JournalEntry, span_id: str | None = None, **data: Any) -> Event:
        self.seq += 1
        ts = e.ended_at if e.ended_at is not None else (e.started_at or 0.0)
        return Event(type=type, run_id=self.run_id, seq=self.seq, ts=ts, span_id=span_id,
                     data={"journal_seq": e.seq, **data})

    def _derive(self, e: JournalEntry) -> list[Event]:
        value = e.value if isinstance(e.value, dict) else {}
        if e.kind == "decision" and value.get("decision") == "genesis":
            self.ceiling = value.get("budget_usd")
            return [self._event("run:start", e, workflow=value.get("workflow"), budget_usd=self.ceiling)]
        if e.kind == "decision" and value.get("decision") == "settle":
            return [self._event("run:end", e, status=value.get("status"), cost=round(self.spent, 10),
                                pending=value.get("pending") or [])]
        if e.kind == "agent":
            return self._agent(e)
        if e.kind == "child":
            if e.ref is None:
                return [self._event("child:start", e, workflow=e.label, scope=e.scope)]
            return [self._event("child:end", e, workflow=e.label, status=e.status)]
        if e.kind == "external":
            return [self._event("external:waiting", e, key=value.get("key"))]
        if e.kind == "approval":
            return [self._event("approval:pending", e, key=value.get("key"), tool=value.get("tool"),
                                agent_id=e.agent_id)]
        if e.kind == "tree" and value.get("kind") == "spawn":
            return [self._event("spawn", e, agent_id=value.get("agent_id"), child_agent_id=value.get("child_agent_id"),
                                goal=value.get("detail"))]
        if e.kind == "tree" and value.get("kind") == "spawn_refused":
            return [self._event("spawn:refused", e, agent_id=value.get("agent_id"), detail=value.get("detail"))]
        return []

    def _agent(self, e: JournalEntry) -> list[Event]:
        if e.ref is None and e.status == "running":
            depth = 1 if e.parent_agent_id is None else self.depth.get(e.parent_agent_id, 1) + 1
            if e.agent_id is not None:
                self.depth[e.agent_id] = depth
            model = e.value.get("model") if isinstance(e.value, dict) else None
            return [self._event("agent:start", e, f"agent-{e.seq}", agent_id=e.agent_id, label=e.label, depth=depth,
                                parent_agent_id=e.parent_agent_id, model=model)]
        if e.ref is None:
            return []
        usd = float(e.cost_usd or 0.0)
        self.spent += usd
        usage = e.usage.model_dump(mode="json") if e.usage is not None else None
        end = self._event("agent:end", e, f"agent-{e.ref}", agent_id=e.agent_id, label=e.label, status=e.status,
                          usage=usage, cost=usd, tool_budget=e.tool_budget)
        remaining = None if self.ceiling is None else max(self.ceiling - self.spent, 0.0)
        update = self._event("budget:update", e, model=e.served_by, usd=usd, spent=round(self.spent, 10),
                             remaining=remaining, ceiling=self.ceiling)
        return [end, update]


async def live_events(handle: RunHandle, after: int = 0) -> AsyncIterator[str]:
    """Every event of a run this process drives, from its start, until `run:end`."""
    async for event in handle.events:
        if event.seq > after:
            yield sse_frame(event)
    try:
        status: RunStatus | None = (await handle).status
    except Exception:  # the run failed before it could settle; its error is in the run's detail
        status = None
    yield end_frame(handle.run_id, status)


async def followed_events(
    store: JournalStore, run_id: str, *, after: int = 0, poll_s: float = 0.5, heartbeat_s: float = 15.0
) -> AsyncIterator[str]:
    """Events derived from the store: history first, then new entries until the run settles.

    The meta is read before the journal, and a run's settle entry is appended before its meta
    says so, so the last poll always sees the settle.
    """
    follower = JournalFollower(run_id)
    seen = 0
    quiet = 0.0
    while True:
        meta = await store.get_meta(run_id)
        entries = await store.load(run_id)
        fresh = [ev for ev in follower.feed(entries[seen:]) if ev.seq > after]
        seen = len(entries)
        for event in fresh:
            yield sse_frame(event)
        if meta is None or meta.status != "running":
            yield end_frame(run_id, meta.status if meta is not None else None)
            return
        quiet = 0.0 if fresh else quiet + poll_s
        if quiet >= heartbeat_s:
            quiet = 0.0
            yield HEARTBEAT
        await asyncio.sleep(poll_s)
