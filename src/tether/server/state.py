"""What one server instance knows beyond the store: its engine and the runs it is driving right now."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Literal

from tether.contracts.events import AgentQueued, AgentStart, Event
from tether.engine.engine import Engine
from tether.engine.handle import RunHandle
from tether.server.limits import DEFAULT_MAX_STREAMS, StreamSlots
from tether.server.models import QueuedAgent


@dataclass
class LiveRun:
    """A run this server's engine drives, with the live-only facts the journal never holds (the queue)."""

    handle: RunHandle
    queued: list[QueuedAgent] = field(default_factory=list)

    def observe(self, event: Event) -> None:
        if isinstance(event, AgentQueued):
            self.queued.append(QueuedAgent(label=event.label, depth=event.depth, since=event.ts))
        elif isinstance(event, AgentStart) and not event.replayed:
            label = event.label
            # FIFO per depth: the first queued agent with this label is the one that got its slot
            for i, q in enumerate(self.queued):
                if q.label == label:
                    del self.queued[i]
                    break


class ServerState:
    """The engine, the token, the live runs and the event-stream slots; owned by one app, never module-global."""

    def __init__(self, engine: Engine, *, token: str | None, mode: Literal["app", "store"], owns_engine: bool,
                 poll_s: float = 0.5, max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        self.engine = engine
        self.token = token
        self.mode = mode
        self.owns_engine = owns_engine
        self.poll_s = poll_s
        self.streams = StreamSlots(max_streams)
        self.live: dict[str, LiveRun] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    def track(self, handle: RunHandle) -> LiveRun:
        """Drive-side bookkeeping for a run started by this server's engine (call right after `start`)."""
        live = LiveRun(handle)
        handle.on("*", live.observe)
        self.live[handle.run_id] = live
        task = asyncio.get_running_loop().create_task(self._forget_when_done(live))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        return live

    def driving(self, run_id: str) -> LiveRun | None:
        live = self.live.get(run_id)
        return live if live is not None and not live.handle.done else None

    async def _forget_when_done(self, live: LiveRun) -> None:
        with contextlib.suppress(Exception):
            await live.handle
        if self.live.get(live.handle.run_id) is live:
            del self.live[live.handle.run_id]

    async def shutdown(self) -> None:
        """Cancel the runs still driven here (they settle `cancelled`, resumable later), then close."""
        for live in list(self.live.values()):
            live.handle.cancel("tether serve stopped")
        for live in list(self.live.values()):
            with contextlib.suppress(Exception):
                await live.handle
        for task in list(self._watchers):
            task.cancel()
        if self.owns_engine:
            await self.engine.close()
