"""`tether run`, `tether resume` and `tether cancel`: drive a run and report how it ended."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from tether.cli.app import Resolved, resolve
from tether.cli.outcome import print_outcome
from tether.cli.shell import (
    JsonOpt,
    StoreOpt,
    console,
    emit_json,
    engine_on,
    esc,
    existing_store,
    parse_args,
    resolve_for_run,
    run_async,
    store_url,
    usage,
)
from tether.contracts.errors import ConfigError, RunNotFoundError

if TYPE_CHECKING:
    from tether.contracts.entries import RunMeta
    from tether.engine.engine import Engine
    from tether.engine.handle import RunHandle
    from tether.engine.options import ForecastGate, OnExhausted, Overshoot
    from tether.engine.outcome import RunOutcome
    from tether.engine.workflow import Workflow

AppOpt = Annotated[
    str | None,
    typer.Option("--app", help="MODULE:ATTR naming your tether.Engine (default: MODULE's `engine`, else a bare one)."),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Drive an existing run even though its args or workflow differ.")
]
EventsOpt = Annotated[str | None, typer.Option("--events", help="Append the run's events to FILE (JSONL).")]
ProgressOpt = Annotated[
    bool | None, typer.Option("--progress/--no-progress", help="The live view (default: on a terminal).")
]
UnpricedOpt = Annotated[
    bool, typer.Option("--allow-unpriced", help="Let models without a price row run under the USD ceiling "
                       "(their usage is itemized, not counted against it).")
]


def bare_queue_flag(argv: list[str]) -> list[str]:
    """`tether run X --queue` without a NAME means the default queue (the parser wants a value, so add it)."""
    words = [w for w in argv if not w.startswith("-")]
    if not words or words[0] != "run":
        return argv
    out = list(argv)
    for i, word in enumerate(out):
        if word == "--queue" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = "--queue=default"
    return out


async def watch(handle: RunHandle, progress: bool | None, json_out: bool) -> RunOutcome:
    """The run's outcome, shown live on a terminal (or as plain lines with --progress off one)."""
    if not (progress if progress is not None else (not json_out and sys.stdout.isatty())):
        return await handle
    from tether.observability.progress import progress as live_view

    return await live_view(handle, console=Console(highlight=False, emoji=False))


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(resume)
    app.command()(cancel)


def run(
    target: Annotated[str, typer.Argument(metavar="MODULE:WORKFLOW", help="The workflow to run.")],
    args: Annotated[str | None, typer.Option("--args", help="JSON object of workflow args.")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="USD ceiling, fixed for the run's life.")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: a new ULID).")] = None,
    app_target: AppOpt = None,
    force: ForceOpt = False,
    store: StoreOpt = None,
    events: EventsOpt = None,
    progress: ProgressOpt = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="Queue it for workers instead: --queue [NAME] (NAME defaults to default)."),
    ] = None,
    priority: Annotated[int, typer.Option("--priority", help="With --queue: higher runs first.")] = 0,
    allow_unpriced: UnpricedOpt = False,
    overshoot: Annotated[
        str | None,
        typer.Option("--overshoot", metavar="hard|bounded", help="hard (default): spend plus every in-flight call's "
                     "worst case stays under the ceiling; bounded: up to one clamped turn per running agent past it."),
    ] = None,
    on_exhausted: Annotated[
        str | None,
        typer.Option("--on-exhausted", metavar="exhausted|suspend", help="exhausted (default): a run its USD ceiling "
                     "stops settles exhausted; suspend: it parks on a budget suspension until the ceiling is raised "
                     "(tether resolve RUN budget:N USD, or tether resume RUN --raise-budget USD), then its stopped "
                     "agents continue from their checkpoints."),
    ] = None,
    forecast_gate: Annotated[
        str | None,
        typer.Option("--forecast-gate", metavar="refuse|suspend", help="Judge the run by its forecast first (tether "
                     "estimate): refuse it when its P95 exceeds the ceiling (nothing written), or suspend it until "
                     "`tether resolve RUN forecast approve`."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Run MODULE:WORKFLOW with --args under an optional --budget; an existing --run-id continues that run.

    With --queue the run is written `queued` for `tether worker` processes instead (PostgreSQL store).
    """
    from tether.engine.options import ON_EXHAUSTED_MODES, OVERSHOOT_MODES

    parsed = parse_args(args) or {}
    if overshoot is not None and overshoot not in OVERSHOOT_MODES:
        usage(f"--overshoot must be one of {', '.join(OVERSHOOT_MODES)}, got {overshoot!r}")
    mode: Overshoot | None = overshoot
    if on_exhausted is not None and on_exhausted not in ON_EXHAUSTED_MODES:
        usage(f"--on-exhausted must be one of {', '.join(ON_EXHAUSTED_MODES)}, got {on_exhausted!r}")
    when_exhausted: OnExhausted | None = on_exhausted
    from tether.engine.options import FORECAST_GATES

    if forecast_gate is not None and forecast_gate not in FORECAST_GATES:
        usage(f"--forecast-gate must be one of {', '.join(FORECAST_GATES)}, got {forecast_gate!r}")
    gate: ForecastGate | None = forecast_gate
    if gate is not None and queue is not None:
        usage("--forecast-gate judges a run started here; a queued run is not judged (docs/budgets.md)")
    resolved = resolve(app=app_target, workflow=target, store=store)
    wf = resolved.workflow
    assert wf is not None
    if queue is not None:
        queued = run_async(lambda: _enqueue(resolved.engine, wf, parsed, run_id, budget, queue, priority,
                                            allow_unpriced, mode, when_exhausted))
        if json_out:
            emit_json({"run_id": queued, "queue": queue, "status": "queued"})
        else:
            console().print(f"{esc(queued)}: queued on {esc(queue)}")
        return

    async def go() -> Ended:
        engine = resolved.engine
        try:
            if run_id is not None:
                meta = await _existing(engine, run_id)
                if meta is not None and not force:
                    _same_run(meta, wf, parsed, "run")
            handle = engine.start(wf, parsed, run_id=run_id, budget_usd=budget, event_log=events,
                                  allow_unpriced=allow_unpriced or None, overshoot=mode,
                                  on_exhausted=when_exhausted, forecast_gate=gate)
            outcome = await watch(handle, progress, json_out)
            return Ended(outcome, await _ceiling(engine, outcome.run_id, budget), await _hints(engine, outcome))
        finally:
            await engine.close()

    raise typer.Exit(run_async(go).print(resolved, target, json_out))


async def _enqueue(engine: Engine, wf: Workflow, args: dict[str, Any], run_id: str | None, budget: float | None,
                   queue: str, priority: int, allow_unpriced: bool, overshoot: Overshoot | None,
                   on_exhausted: OnExhausted | None) -> str:
    try:
        return await engine.enqueue(wf, args, run_id=run_id, budget_usd=budget, queue=queue, priority=priority,
                                    allow_unpriced=allow_unpriced or None, overshoot=overshoot,
                                    on_exhausted=on_exhausted)
    finally:
        await engine.close()


def resume(
    run_id: str,
    target: Annotated[
        str | None, typer.Option("--workflow", help="MODULE:WORKFLOW (optional when --app registers the workflow).")
    ] = None,
    args: Annotated[str | None, typer.Option("--args", help="JSON args; must match the run's unless --force.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Replay-strict: no live call, nothing written.")] = False,
    app_target: AppOpt = None,
    force: ForceOpt = False,
    store: StoreOpt = None,
    events: EventsOpt = None,
    progress: ProgressOpt = None,
    allow_unpriced: UnpricedOpt = False,
    raise_budget: Annotated[
        float | None, typer.Option("--raise-budget", metavar="USD", help="Raise the run's USD ceiling to USD "
                                   "(journaled as an operator's decision; never lowered).")
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why --raise-budget / --allow-unpriced (journaled).")] = "",
    json_out: JsonOpt = False,
) -> None:
    """Resume RUN_ID from its journal: completed calls replay for free."""
    parsed = parse_args(args)
    resolved = resolve_for_run("resume", app=app_target, workflow=target, store=store)

    async def go() -> Ended:
        engine = resolved.engine
        try:
            meta = await engine.run_meta(run_id)
            wf = _workflow_of(resolved, meta)
            if not force:
                _same_run(meta, wf, parsed, "resume")
            handle = await engine.start_resume(run_id, wf, parsed, dry_run=dry_run, event_log=events,
                                               allow_unpriced=allow_unpriced or None, raise_budget_usd=raise_budget,
                                               raise_reason=reason)
            outcome = await watch(handle, progress, json_out)
            ceiling = raise_budget if raise_budget is not None else meta.budget_usd
            return Ended(outcome, ceiling, await _hints(engine, outcome))
        finally:
            await engine.close()

    raise typer.Exit(run_async(go).print(resolved, target, json_out))


def cancel(
    run_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the run's settle entry.")] = "cancelled",
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for a run driven elsewhere to settle.")
    ] = 0.0,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cancel RUN_ID: settled at once when nothing drives it, else stopped by its driver at the next lease renewal."""
    url = store_url(store)
    engine = engine_on(url)
    existing_store(url)

    async def go() -> tuple[str, str]:
        try:
            result = await engine.cancel(run_id, reason)
            deadline = time.monotonic() + wait
            status = (await engine.run_meta(run_id)).status
            while result == "requested" and status == "running" and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                status = (await engine.run_meta(run_id)).status
            return result, status
        finally:
            await engine.close()

    result, status = run_async(go)
    if json_out:
        emit_json({"run_id": run_id, "result": result, "status": status})
        return
    if result == "cancelled":
        console().print(f"run {esc(run_id)}: cancelled")
    elif status == "running":
        console().print(
            f"run {esc(run_id)}: cancel requested; the process driving it stops it at its next lease renewal "
            f"(a third of the lease TTL, 20 s by default)"
        )
    else:
        console().print(f"run {esc(run_id)}: cancel requested; the run settled {esc(status)}")


@dataclass(frozen=True)
class Ended:
    """How a run or resume ended, with what its printout needs from the store before the engine closes."""

    outcome: RunOutcome
    ceiling: float | None
    hints: dict[str, str]
    """What each pending key takes (`allow|deny` for a tool approval), for its `tether resolve` line."""

    def print(self, resolved: Resolved, target: str | None, json_out: bool) -> int:
        return print_outcome(self.outcome, self.ceiling, resolved, target, json_out, self.hints)


async def _hints(engine: Engine, outcome: RunOutcome) -> dict[str, str]:
    from tether.engine.resolutions import value_hints

    return value_hints(await engine.inspect(outcome.run_id)) if outcome.pending else {}


async def _existing(engine: Engine, run_id: str) -> RunMeta | None:
    try:
        return await engine.run_meta(run_id)
    except RunNotFoundError:
        return None


async def _ceiling(engine: Engine, run_id: str, given: float | None) -> float | None:
    meta = await _existing(engine, run_id)
    return meta.budget_usd if meta is not None else given


def _workflow_of(resolved: Resolved, meta: RunMeta) -> Workflow:
    if resolved.workflow is not None:
        return resolved.workflow
    known = resolved.engine.workflows.get(meta.workflow)
    if known is None:
        raise ConfigError(
            f"run {meta.run_id!r} is a run of workflow {meta.workflow!r}, which the engine {resolved.target} does not "
            f"register; pass --workflow MODULE:WORKFLOW (or register it: Engine(workflows=[...]))",
            run_id=meta.run_id, workflow=meta.workflow,
        )
    return known


def _same_run(meta: RunMeta, wf: Workflow, args: dict[str, Any] | None, verb: str) -> None:
    """Refuse to drive an existing run with another workflow or other args (the journal would not fit them)."""
    from tether.journal.canonical import content_key

    if meta.workflow != wf.name:
        raise ConfigError(
            f"run {meta.run_id!r} is a run of workflow {meta.workflow!r}, not {wf.name!r}; {verb} it with its own "
            f"workflow, pick a new --run-id, or pass --force",
            run_id=meta.run_id, workflow=meta.workflow,
        )
    if args is not None and meta.args_hash is not None and content_key(args) != meta.args_hash:
        same = "omit --args to resume with them" if verb == "resume" else f"`tether resume {meta.run_id}` to go on"
        raise ConfigError(
            f"--args differ from the ones run {meta.run_id!r} started with; pass the same --args (or {same}), "
            f"pick a new --run-id, or pass --force to {verb} it with these",
            run_id=meta.run_id,
        )
