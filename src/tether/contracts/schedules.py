"""Schedules' data and the store seam that holds them: a workflow queued once per cron tick."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Schedule:
    """A workflow queued on `queue` at every tick of `cron` (UTC), with these args and run options."""

    name: str
    workflow: str
    cron: str
    """Five fields (minute hour day month weekday), or six with seconds last, as croniter reads them."""
    args: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    """The durable run options each tick's run starts with, in their journaled (genesis) form."""
    next_at: float = 0.0
    """The next tick not fired yet (epoch seconds, by the database's clock)."""
    created_at: float = 0.0
    last_tick: float | None = None
    last_run: str | None = None
    """The run id of the last tick fired."""


@runtime_checkable
class ScheduleStore(Protocol):
    """A store that holds schedules beside its run queue (PostgreSQL)."""

    async def db_now(self) -> float:
        """The store's clock (epoch seconds): ticks are due by it, whatever the hosts' clocks say."""

    async def schedule_put(self, schedule: Schedule) -> Schedule:
        """Add or redefine (an unchanged cron keeps its next tick); returns the stored schedule."""

    async def schedule_list(self) -> list[Schedule]: ...

    async def schedule_remove(self, name: str) -> bool: ...

    async def schedules_for(self, workflows: list[str]) -> tuple[float | None, list[Schedule]]:
        """The store's clock and every schedule of these workflows (clock None when there are none)."""

    async def schedule_advance(self, name: str, old_next: float, new_next: float, tick: float, run_id: str) -> bool:
        """Move the next tick on, only if it is still `old_next` (another worker did not first)."""
