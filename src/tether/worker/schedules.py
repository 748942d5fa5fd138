"""Firing schedules: a workflow queued once per cron tick, by whichever worker looks first.

Each tick's run has its own id, `sched:<name>:<tick, UTC ISO>`, so a tick is queued at most once however
many workers fire it: enqueueing an id that exists changes nothing. A worker enqueues every due tick's
run, then moves the schedule's next tick on by compare-and-set. Missed ticks (no worker ran): every tick
of the last `CATCH_UP_S` seconds fires; of older missed ticks only the latest fires, once. Declaring a
schedule (`engine.schedule`, `tether schedule add`) is `tether.engine.schedules`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tether.contracts.schedules import Schedule, ScheduleStore
from tether.engine.schedules import cron_iter, next_tick

if TYPE_CHECKING:
    from tether.engine.engine import Engine

CATCH_UP_S = 60.0
"""Missed ticks younger than this all fire; of the older ones only the latest does."""
MAX_TICKS = 120
"""At most this many ticks of one schedule fire per look (a per-second schedule catching up a minute)."""


def due_ticks(schedule: Schedule, now: float) -> list[float]:
    """The ticks to fire at `now`: all of the last `CATCH_UP_S` s, and the latest older one missed."""
    if schedule.next_at > now:
        return []
    horizon = max(schedule.next_at, now - CATCH_UP_S)
    fire: list[float] = []
    if schedule.next_at < horizon:
        older = float(cron_iter(schedule.cron, horizon).get_prev(float))
        if schedule.next_at <= older < horizon:
            fire.append(older)
    it = cron_iter(schedule.cron, math.ceil(horizon) - 1.0)  # croniter works in whole seconds
    while len(fire) < MAX_TICKS:
        tick = float(it.get_next(float))
        if tick > now:
            break
        if tick >= horizon:
            fire.append(tick)
    return fire


def ticks_id(schedule: Schedule, ticks: Sequence[float]) -> str:
    return tick_run_id(schedule.name, ticks[-1])


def tick_run_id(name: str, tick: float) -> str:
    stamp = datetime.fromtimestamp(tick, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"sched:{name}:{stamp}"


async def fire_due(engine: Engine, store: ScheduleStore, workflows: Sequence[str], log: Any = None) -> float | None:
    """Queue the due ticks of the schedules of `workflows`; seconds until the next tick (None: no schedules)."""
    now, schedules = await store.schedules_for(list(workflows))
    if now is None:
        return None
    soonest: float | None = None
    for schedule in schedules:
        next_at = schedule.next_at
        ticks = due_ticks(schedule, now)
        if ticks:
            for tick in ticks:
                await fire(engine, schedule, tick)
            next_at = next_tick(schedule.cron, max(now, ticks[-1]))
            moved = await store.schedule_advance(schedule.name, schedule.next_at, next_at, ticks[-1],
                                                 tick_run_id(schedule.name, ticks[-1]))
            if log is not None and moved:
                log(f"schedule {schedule.name}: queued {len(ticks)} tick(s), the last {ticks_id(schedule, ticks)}")
        left = next_at - now
        soonest = left if soonest is None else min(soonest, left)
    return soonest


async def fire(engine: Engine, schedule: Schedule, tick: float) -> str:
    """Queue the run of one tick (nothing changes when it is queued already)."""
    from tether.engine.options import loaded_options

    return await engine.enqueue(
        schedule.workflow, schedule.args, run_id=tick_run_id(schedule.name, tick), queue=schedule.queue,
        priority=schedule.priority, **loaded_options(schedule.options),
    )
