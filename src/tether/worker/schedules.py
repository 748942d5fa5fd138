"""Schedules: a workflow queued once per cron tick, fired by whichever worker looks first.

Each tick's run has its own id, `sched:<name>:<tick, UTC ISO>`, so a tick is queued at most once however
many workers fire it: enqueueing an id that exists changes nothing. A worker enqueues every due tick's
run, then moves the schedule's next tick on by compare-and-set. Missed ticks (no worker ran): every tick
of the last `CATCH_UP_S` seconds fires; of older missed ticks only the latest fires, once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tether.contracts.errors import ConfigError
from tether.contracts.schedules import Schedule, ScheduleStore

if TYPE_CHECKING:
    from tether.engine.engine import Engine

CATCH_UP_S = 60.0
"""Missed ticks younger than this all fire; of the older ones only the latest does."""
MAX_TICKS = 120
"""At most this many ticks of one schedule fire per look (a per-second schedule catching up a minute)."""


def _croniter_class() -> Any:
    """croniter, imported on first use (the postgres extra installs it)."""
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover
        raise ConfigError("schedules need croniter: pip install 'tether[postgres]'") from None
    return croniter


def _croniter(cron: str, start: float) -> Any:
    return _croniter_class()(cron, datetime.fromtimestamp(start, UTC))


def check_cron(cron: str) -> None:
    """`ConfigError` unless croniter reads `cron` (five fields, or six with seconds last)."""
    if not isinstance(cron, str) or not _croniter_class().is_valid(cron):
        raise ConfigError(
            f"cron {cron!r} is not a cron expression; use five fields (minute hour day month weekday), e.g. "
            f"'*/5 * * * *', or six with seconds last, e.g. '* * * * * */10'"
        )


def next_tick(cron: str, after: float) -> float:
    """The first tick of `cron` strictly after `after`; a cron with no such date (`0 0 31 2 *`) is a `ConfigError`."""
    try:
        return float(_croniter(cron, after).get_next(float))
    except ValueError as exc:  # croniter's errors are ValueErrors (CroniterBadDateError: no date matches)
        raise ConfigError(
            f"cron {cron!r} never fires: no date matches it ({exc}); check the day of month against the month "
            f"(February has no 30th or 31st)", cron=cron,
        ) from None


def due_ticks(schedule: Schedule, now: float) -> list[float]:
    """The ticks to fire at `now`: all of the last `CATCH_UP_S` s, and the latest older one missed."""
    if schedule.next_at > now:
        return []
    horizon = max(schedule.next_at, now - CATCH_UP_S)
    fire: list[float] = []
    if schedule.next_at < horizon:
        older = float(_croniter(schedule.cron, horizon).get_prev(float))
        if schedule.next_at <= older < horizon:
            fire.append(older)
    it = _croniter(schedule.cron, math.ceil(horizon) - 1.0)  # croniter works in whole seconds
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


def schedule_store(store: object, what: str) -> ScheduleStore:
    if isinstance(store, ScheduleStore):
        return store
    raise ConfigError(
        f"{what} needs a store that holds schedules beside a run queue, and {type(store).__name__} does not; use "
        f"a PostgreSQL store (store='postgresql://user@host:5432/db'), which every worker shares.",
        store=type(store).__name__,
    )


def check_name(name: str) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or any(c in name for c in "/\\:") \
            or not name.isprintable():
        raise ConfigError(f"schedule name {name!r} must be 1 to 100 printable characters without ':', '/' or '\\'")


async def add_schedule(
    store: ScheduleStore, name: str, workflow: str, cron: str, args: Mapping[str, Any] | None, queue: str,
    priority: int, options: Mapping[str, Any],
) -> Schedule:
    """Store the schedule (its first tick is the first after now, by the store's clock)."""
    check_name(name)
    check_cron(cron)
    now = await store.db_now()
    schedule = Schedule(name=name, workflow=workflow, cron=cron, args=dict(args or {}), queue=queue,
                        priority=priority, options=dict(options), next_at=next_tick(cron, now), created_at=now)
    return await store.schedule_put(schedule)


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
