"""`tether schedule add/list/remove`: workflows queued once per cron tick, fired by `tether worker` processes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from tether.cli.app import resolve
from tether.cli.shell import JsonOpt, StoreOpt, console, emit_json, esc, parse_args, run_async, usage

if TYPE_CHECKING:
    from tether.contracts.budgets import Budget
    from tether.contracts.schedules import Schedule
    from tether.engine.engine import Engine

T = TypeVar("T")
schedule_app = typer.Typer(help="Queue a workflow at every tick of a cron expression (PostgreSQL stores).",
                           no_args_is_help=True)

AppOpt = Annotated[
    str | None, typer.Option("--app", help="MODULE:ENGINE whose engine (and store) holds the schedules.")
]


def register(app: typer.Typer) -> None:
    app.add_typer(schedule_app, name="schedule")


def _on_engine(app_target: str | None, store: str | None, fn: Callable[[Engine], Awaitable[T]]) -> T:
    engine = resolve(app=app_target, store=store).engine  # the one resolution every command uses

    async def go() -> T:
        try:
            return await fn(engine)
        finally:
            await engine.close()

    return run_async(go)


def parse_budget(text: str) -> Budget:
    """`SCOPE=USD`, `SCOPE=USD/day` or `SCOPE=USD/hour` as a `tether.Budget`."""
    from tether.contracts.budgets import WINDOWS, Budget

    scope, sep, amount = text.rpartition("=")
    usd, _, window = amount.partition("/")
    try:
        value = float(usd)
    except ValueError:
        value = -1.0
    if not sep or not scope or value < 0 or (window and window not in WINDOWS):
        usage(f"--tenant-budget {text!r} must be SCOPE=USD[/day|/hour], e.g. tenant:acme=5/day")
    return Budget(usd=value, window="day" if window == "day" else "hour" if window == "hour" else None, scope=scope)


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _budgets(schedule: Schedule) -> str:
    from tether.contracts.budgets import Budget

    stored = schedule.options.get("budgets") or []
    return ", ".join(Budget.from_json(b).describe() for b in stored) or "-"


@schedule_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The schedule's name (its runs are sched:NAME:<tick>).")],
    workflow: Annotated[str, typer.Argument(help="A workflow the app's engine registers (by name).")],
    cron: Annotated[str, typer.Option("--cron", help="Five cron fields (UTC), or six with seconds last.")],
    app_target: AppOpt = None,
    store: StoreOpt = None,
    args: Annotated[str | None, typer.Option("--args", help="The workflow's args as a JSON object.")] = None,
    queue: Annotated[str, typer.Option("--queue", help="The queue each tick's run joins.")] = "default",
    priority: Annotated[int, typer.Option("--priority", help="Higher runs first.")] = 0,
    budget: Annotated[float | None, typer.Option("--budget", min=0.0, help="Each run's own USD ceiling.")] = None,
    tenant_budget: Annotated[
        list[str] | None,
        typer.Option("--tenant-budget", help="A budget across runs, SCOPE=USD[/day|/hour] (repeat for several)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Add a schedule (declaring it again with the same cron keeps its next tick)."""
    budgets = [parse_budget(b) for b in tenant_budget or []] or None
    given = parse_args(args) or {}

    async def go(engine: Engine) -> Schedule:
        return await engine.schedule(workflow, cron=cron, args=given, name=name, queue=queue, priority=priority,
                                     budget_usd=budget, budgets=budgets)

    added = _on_engine(app_target, store, go)
    if json_out:
        emit_json(_doc(added))
        return
    console().print(f"schedule {esc(added.name)}: {esc(added.workflow)} at {esc(added.cron)} on queue "
                    f"{esc(added.queue)}; next tick {_when(added.next_at)} (run sched:{esc(added.name)}:<tick>)")


@schedule_app.command("list")
def list_(app_target: AppOpt = None, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """List the schedules with their next and last ticks."""
    from tether.engine.schedules import schedule_store


    async def go(engine: Engine) -> list[Schedule]:
        return await schedule_store(await engine.store(), "tether schedule").schedule_list()

    found = _on_engine(app_target, store, go)
    if json_out:
        emit_json([_doc(s) for s in found])
        return
    con = console()
    if not found:
        con.print("no schedules")
    for s in found:
        con.print(f"{esc(s.name)}  {esc(s.workflow)}  {esc(s.cron)}  queue {esc(s.queue)}  next {_when(s.next_at)}  "
                  f"last {esc(s.last_run or '-')}  budgets {esc(_budgets(s))}")


@schedule_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="The schedule to remove (runs already queued stay queued).")],
    app_target: AppOpt = None,
    store: StoreOpt = None,
) -> None:
    """Remove a schedule; no tick fires after this (runs it queued already are left as they are)."""
    from tether.engine.schedules import schedule_store


    async def go(engine: Engine) -> bool:
        return await schedule_store(await engine.store(), "tether schedule").schedule_remove(name)

    if not _on_engine(app_target, store, go):
        from tether.contracts.errors import ConfigError

        raise ConfigError(f"no schedule {name!r} in this store; `tether schedule list` shows the ones there are")
    console().print(f"schedule {esc(name)} removed")


def _doc(s: Schedule) -> dict[str, Any]:
    return {"name": s.name, "workflow": s.workflow, "cron": s.cron, "args": s.args, "queue": s.queue,
            "priority": s.priority, "options": s.options, "next_at": s.next_at, "last_tick": s.last_tick,
            "last_run": s.last_run}
