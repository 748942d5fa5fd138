"""Run events over Server-Sent Events: live from a handle, or derived from the journal of a run driven elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from tether.contracts.entries import JournalEntry, MetaStatus
from tether.contracts.events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    ApprovalPending,
    BudgetUpdate,
    ChildEnd,
    ChildStart,
    Event,
    ExternalWaiting,
    RunEnd,
    RunStart,
    Spawn,
    SpawnRefused,
)
from tether.contracts.protocols import JournalStore
from tether.contracts.results import AgentError
from tether.contracts.usage import Usage
from tether.engine.handle import RunHandle
from tether.journal.cost import fold_cost
from tether.journal.lineage import lineage_from
from tether.server.models import StreamEnd

HEARTBEAT = ": keep-alive\n\n"


def event_json(event: Event) -> str:
    """The one place an event becomes JSON: the typed model of its `type` (every field a JSON value)."""
    return event.model_dump_json()


def sse_frame(event: Event) -> str:
    return f"id: {event.seq}\nevent: {event.type}\ndata: {event_json(event)}\n\n"


def end_frame(run_id: str, status: MetaStatus | None) -> str:
    """Sent last on every stream (`event: end`): the run settled; clients close instead of reconnecting."""
    return f"event: end\ndata: {StreamEnd(run_id=run_id, status=status).model_dump_json()}\n\n"


class JournalFollower:
    """Turns journal entries into the typed lifecycle events a live run would have emitted for them.

    Deterministic: the same journal always yields the same events with the same `seq`, so a
    reconnecting client's `Last-Event-ID` can skip what it has already seen.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.seq = 0
        self.spent = 0.0
        self.ceiling: float | None = None
        self.depth: dict[int, int] = {}
        self.seen: list[JournalEntry] = []
        self.copied_through = 0
        """A fork's copied prefix: its agents' terminals are the source's spend, not this run's."""

    def feed(self, entries: Iterable[JournalEntry]) -> list[Event]:
        out: list[Event] = []
        for e in entries:
            self.seen.append(e)
            out.extend(self._derive(e))
        return out

    def _base(self, e: JournalEntry, span_id: str | None = None) -> dict[str, Any]:
        self.seq += 1
        ts = e.ended_at if e.ended_at is not None else (e.started_at or 0.0)
        return {"run_id": self.run_id, "seq": self.seq, "ts": ts, "span_id": span_id}

    def _money(self) -> dict[str, Any]:
        remaining = None if self.ceiling is None else max(self.ceiling - self.spent, 0.0)
        return {"spent_usd": round(self.spent, 10), "ceiling_usd": self.ceiling, "remaining_usd": remaining}

    def _derive(self, e: JournalEntry) -> list[Event]:
        value = e.value if isinstance(e.value, dict) else {}
        if e.kind == "decision" and value.get("decision") == "genesis":
            self.ceiling = value.get("budget_usd")
            lineage = lineage_from(value)
            self.copied_through = lineage.reused_through if lineage is not None else 0
            return [RunStart(**self._base(e), workflow=str(value.get("workflow") or ""), **self._money())]
        if e.kind == "decision" and value.get("decision") == "settle":
            cost = fold_cost(self.seen)  # the run's figures are the cost report's, as a live run's `run:end`
            self.spent = cost.total_usd
            return [RunEnd(**self._base(e), status=value.get("status") or "error", cost_usd=cost.total_usd,
                           orphaned_usd=cost.orphaned_usd, orphaned_calls=cost.orphaned_calls,
                           reused_usd=cost.reused_usd, reused_calls=cost.reused_calls, usage=cost.usage,
                           pending=list(value.get("pending") or []), **self._money())]
        if e.kind == "agent":
            return self._agent(e)
        if e.kind == "child":
            if e.ref is None:
                return [ChildStart(**self._base(e), workflow=e.label or "", scope=e.scope)]
            return [ChildEnd(**self._base(e), workflow=e.label or "", status=e.status or "error")]
        if e.kind == "external":
            return [ExternalWaiting(**self._base(e), key=str(value.get("key")))]
        if e.kind == "approval":
            return [ApprovalPending(**self._base(e), key=str(value.get("key")), tool=value.get("tool"),
                                    agent_id=e.agent_id)]
        if e.kind == "tree" and value.get("kind") in ("spawn", "spawn_refused"):
            row = AgentEvent.model_validate(value).model_dump(exclude={"kind"})
            if value.get("kind") == "spawn":
                return [Spawn(**self._base(e), **row)]
            return [SpawnRefused(**self._base(e), **row, goal="")]
        return []

    def _agent(self, e: JournalEntry) -> list[Event]:
        if e.ref is None and e.status == "running":
            depth = 1 if e.parent_agent_id is None else self.depth.get(e.parent_agent_id, 1) + 1
            if e.agent_id is not None:
                self.depth[e.agent_id] = depth
            model = e.value.get("model") if isinstance(e.value, dict) else None
            return [AgentStart(**self._base(e, f"agent-{e.seq}"), agent_id=e.agent_id, label=e.label, depth=depth,
                               parent_agent_id=e.parent_agent_id, model=model, agent_type=e.agent_type)]
        if e.ref is None:
            return []
        usd = float(e.cost_usd or 0.0) + float(e.orphaned_usd or 0.0)
        if e.ref > self.copied_through:  # a fork's copy was paid by its source
            self.spent += usd
        value = e.value if isinstance(e.value, dict) else {}
        end = AgentEnd(
            **self._base(e, f"agent-{e.ref}"), agent_id=e.agent_id, label=e.label,
            depth=self.depth.get(e.agent_id or 0, 1),
            status=e.status if e.status in ("ok", "error", "limit", "cancelled", "skipped") else "error",
            usage=e.usage or Usage(), cost_usd=usd, turns=int(value.get("turns") or 0), served_by=e.served_by,
            error=AgentError.model_validate(e.error) if e.error else None, parent_agent_id=e.parent_agent_id,
            provider_calls=e.provider_calls or 0,
        )
        update = BudgetUpdate(**self._base(e), model=e.served_by or "", usd=usd, agent_id=e.agent_id, **self._money())
        return [end, update]


async def live_events(handle: RunHandle, after: int = 0) -> AsyncIterator[str]:
    """Every event of a run this process drives, from its start, until `run:end`."""
    async for event in handle.events:
        if event.seq > after:
            yield sse_frame(event)
    try:
        status: MetaStatus | None = (await handle).status
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
