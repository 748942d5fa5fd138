"""Schedules on PostgreSQL: one row per schedule with its next tick, advanced by compare-and-set.

A worker that finds a schedule due enqueues the tick's run under the tick's own run id first (so a
second worker firing the same tick finds the run queued and changes nothing), then moves `next_at` on
only if nobody moved it meanwhile. Due is judged by the database's clock.
"""

from __future__ import annotations

import json
from typing import Any

from tether.contracts.schedules import Schedule

SCHEDULE_TABLES = """
CREATE TABLE IF NOT EXISTS {s}.schedules (
    name text PRIMARY KEY, workflow text NOT NULL, cron text NOT NULL, args text NOT NULL, queue text NOT NULL,
    priority integer NOT NULL, options text NOT NULL, next_at double precision NOT NULL,
    created_at double precision NOT NULL, last_tick double precision, last_run text);
CREATE INDEX IF NOT EXISTS schedules_due ON {s}.schedules (next_at)
"""

_COLUMNS = "name, workflow, cron, args, queue, priority, options, next_at, created_at, last_tick, last_run"


def schedule_statements(schema: str) -> dict[str, str]:
    s = f'"{schema}"'
    now = "extract(epoch FROM clock_timestamp())"
    return {
        # A definition written again unchanged keeps its next tick (every worker may declare its app's
        # schedules at start); a changed cron starts from the new one's next tick.
        "schedule_put": f"INSERT INTO {s}.schedules AS c ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {now},"
        f" NULL, NULL) ON CONFLICT (name) DO UPDATE SET workflow = EXCLUDED.workflow, cron = EXCLUDED.cron,"
        f" args = EXCLUDED.args, queue = EXCLUDED.queue, priority = EXCLUDED.priority, options = EXCLUDED.options,"
        f" next_at = CASE WHEN c.cron = EXCLUDED.cron THEN c.next_at ELSE EXCLUDED.next_at END"
        f" RETURNING {_COLUMNS}",
        "schedule_list": f"SELECT {_COLUMNS} FROM {s}.schedules ORDER BY name",
        "schedule_remove": f"DELETE FROM {s}.schedules WHERE name = %s RETURNING name",
        "schedule_for": f"SELECT {now}, {_COLUMNS} FROM {s}.schedules WHERE workflow = ANY (%s::text[])"
        f" ORDER BY next_at, name",
        "schedule_advance": f"UPDATE {s}.schedules SET next_at = %s, last_tick = %s, last_run = %s"
        f" WHERE name = %s AND next_at = %s RETURNING name",
        "db_now": f"SELECT {now}",
    }


def _schedule(row: tuple[Any, ...]) -> Schedule:
    name, workflow, cron, args, queue, priority, options, next_at, created_at, last_tick, last_run = row
    return Schedule(name=name, workflow=workflow, cron=cron, args=json.loads(args), queue=queue, priority=priority,
                    options=json.loads(options), next_at=next_at, created_at=created_at, last_tick=last_tick,
                    last_run=last_run)


class PostgresSchedules:
    """The `ScheduleStore` half of `PostgresStore`."""

    async def _fetch(self, name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def db_now(self) -> float:
        ((now,),) = await self._fetch("db_now", ())
        return float(now)

    async def schedule_put(self, schedule: Schedule) -> Schedule:
        params = (schedule.name, schedule.workflow, schedule.cron, json.dumps(schedule.args), schedule.queue,
                  schedule.priority, json.dumps(schedule.options), schedule.next_at)
        (row,) = await self._fetch("schedule_put", params)
        return _schedule(row)

    async def schedule_list(self) -> list[Schedule]:
        return [_schedule(r) for r in await self._fetch("schedule_list", ())]

    async def schedule_remove(self, name: str) -> bool:
        return bool(await self._fetch("schedule_remove", (name,)))

    async def schedules_for(self, workflows: list[str]) -> tuple[float | None, list[Schedule]]:
        rows = await self._fetch("schedule_for", (workflows,))
        return (float(rows[0][0]) if rows else None), [_schedule(r[1:]) for r in rows]

    async def schedule_advance(self, name: str, old_next: float, new_next: float, tick: float, run_id: str) -> bool:
        return bool(await self._fetch("schedule_advance", (new_next, tick, run_id, name, old_next)))
