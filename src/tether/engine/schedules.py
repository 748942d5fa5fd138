"""Declaring schedules: a workflow queued once per cron tick (`engine.schedule`, `tether schedule add`).

A schedule is stored (its first tick the first after now, by the store's clock) in a store that holds
schedules beside a run queue; `tether worker` processes fire its ticks (`tether.worker.schedules`). The cron
reading both sides share lives here, below them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Unpack

from tether.budget.tenant import require_ledger
from tether.contracts.errors import ConfigError
from tether.contracts.schedules import Schedule, ScheduleStore
from tether.engine.options import RunOptions, segment_options, stored_options
from tether.engine.seam import EngineSeam, WorkflowRef


def _croniter_class() -> Any:
    """croniter, imported on first use (the postgres extra installs it)."""
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover
        raise ConfigError("schedules need croniter: pip install 'tether[postgres]'") from None
    return croniter


def cron_iter(cron: str, start: float) -> Any:
    """A croniter over `cron` from `start` (epoch seconds, UTC)."""
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
        return float(cron_iter(cron, after).get_next(float))
    except ValueError as exc:  # croniter's errors are ValueErrors (CroniterBadDateError: no date matches)
        raise ConfigError(
            f"cron {cron!r} never fires: no date matches it ({exc}); check the day of month against the month "
            f"(February has no 30th or 31st)", cron=cron,
        ) from None


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


async def schedule(
    engine: EngineSeam, wf: WorkflowRef, *, cron: str, args: Mapping[str, Any] | None, name: str | None, queue: str,
    priority: int, **options: Unpack[RunOptions],
) -> Schedule:
    """`Engine.schedule`: store the schedule of `wf` under `name` (the workflow's name by default)."""
    flow = engine.resolve_workflow(wf)
    opts = segment_options(options, "schedule()")
    store = await engine.store()
    require_ledger(store, opts.budgets)
    return await add_schedule(schedule_store(store, "engine.schedule()"), name or flow.name, flow.name, cron,
                              args, queue, priority, stored_options(opts))
