"""`Suspensions`: branches parked on `await_external` or an approval, and the values that wake them.

A branch that suspends stops doing work (`live` drops); when every live branch has parked, the
segment settles `suspended`. A value for a parked key is validated, journaled, then handed over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tether.contracts.entries import JournalEntry
from tether.contracts.events import BaseEvent
from tether.engine.events import EventStream
from tether.engine.external import ExternalSchema, check_resolution
from tether.engine.journal_writer import JournalWriter
from tether.engine.replay import Replay
from tether.journal.matching import JournalIndex


@dataclass(eq=False)
class Suspensions:
    """One segment's parked branches, by the human key `resolve_external` is called with."""

    journal: JournalWriter
    replay: Replay
    events: EventStream
    clock: Callable[[], float]
    parked: dict[str, tuple[int, asyncio.Future[Any]]] = field(default_factory=dict)
    all_parked: asyncio.Event = field(default_factory=asyncio.Event)
    schemas: dict[int, ExternalSchema] = field(default_factory=dict)
    """The declared schema of each `await_external` parked in this segment, by suspension seq."""
    pending_writes: list[asyncio.Future[Any]] = field(default_factory=list)
    """Resolutions that arrived before the segment started, being journaled now."""

    def branch_waiting(self, delta: int) -> None:
        """A branch stopped (-1) or resumed (+1) doing work; zero live with parked ones settles."""
        journal = self.journal
        journal.live += delta
        if journal.live <= 0 and self.parked:
            self.all_parked.set()

    async def suspend(self, scope: str, entry: JournalEntry, key: str, event: BaseEvent) -> Any:
        """The value that closes suspension `entry`: journaled already, or awaited by parking."""
        assert entry.seq is not None
        closer = self.journal.index.closer(entry.seq)
        if closer is not None and closer.kind == "abandon":
            raise self.replay.skipped(scope, entry.seq)
        if closer is not None:
            return closer.value
        self.events.emit(event)
        return await self.park(key, entry.seq)

    async def park(self, key: str, seq: int) -> Any:
        """Park this branch until `key` is resolved live (or the run settles `suspended`)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.parked[key] = (seq, fut)
        self.branch_waiting(-1)
        try:
            return await fut
        finally:
            self.parked.pop(key, None)
            if not fut.cancelled():
                self.branch_waiting(+1)

    def wake(self, key: str, value: Any) -> bool:
        slot = self.parked.get(key)
        if slot is None or slot[1].done():
            return False
        slot[1].set_result(value)
        return True

    async def resolve(self, key: str, value: Any) -> bool:
        """Close the open suspension named `key` with `value`; False when none is open.

        `InvalidResolutionError` (nothing journaled) when the value does not match its schema.
        """
        target = find_open_suspension(self.journal.index, key)
        if target is None:
            return False
        assert target.seq is not None
        # Validated before anything is written: an invalid value leaves the suspension open.
        data = check_resolution(target, value, self.schemas.get(target.seq), run_id=self.journal.run_id)
        await self.journal.append(
            JournalEntry(kind="resolution", ref=target.seq, scope=target.scope, key=target.key, value=data,
                         started_at=self.clock())
        )
        self.wake(key, data)
        return True

    def later(self, resolution: Awaitable[Any]) -> None:
        """Journal a resolution that arrived before the segment started (its outcome is an event)."""
        self.pending_writes.append(asyncio.ensure_future(resolution))


def suspension_key(entry: JournalEntry) -> str | None:
    """The human key of a suspension entry (what `resolve_external` is called with)."""
    if isinstance(entry.value, dict):
        k = entry.value.get("key")
        return k if isinstance(k, str) else None
    return None


def pending_keys(index: JournalIndex) -> list[str]:
    """The keys of a run's open suspensions, in journal order (what `outcome.pending` lists)."""
    return [k for k in (suspension_key(e) for e in index.open_suspensions()) if k]


def find_open_suspension(index: JournalIndex, key: str) -> JournalEntry | None:
    for e in index.open_suspensions():
        if suspension_key(e) == key:
            return e
    return None
