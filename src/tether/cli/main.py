"""The `tether` command line: demo, run, resume, and the read side over any store."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tether.contracts.errors import ConfigError, TetherError
from tether.engine.engine import DEFAULT_STORE, Engine
from tether.engine.workflow import Workflow

app = typer.Typer(add_completion=False, no_args_is_help=True, help="tether: durable, budget-bounded agent workflows.")
T = TypeVar("T")

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URL (or TETHER_STORE).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


class State:
    debug = False


def _store(url: str | None) -> str:
    return url or os.environ.get("TETHER_STORE") or DEFAULT_STORE


def _console() -> Console:
    return Console(highlight=False)


def _run(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; a TetherError prints one clear line and exits 1 (traceback with --debug)."""
    try:
        return asyncio.run(make())  # type: ignore[arg-type]
    except TetherError as exc:
        _fail(exc)


def _fail(exc: TetherError) -> NoReturn:
    """One clear line and exit 1 (the traceback with --debug)."""
    if State.debug:
        raise exc
    _console().print(f"[red]error[/red] ({exc.code}): {exc.message}", soft_wrap=True)
    raise typer.Exit(1) from None


def _load_workflow(target: str) -> Workflow:
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"workflow {target!r} must be MODULE:WORKFLOW (e.g. myapp.flows:panel)")
    sys.path.insert(0, os.getcwd())
    obj = getattr(importlib.import_module(module_name), attr, None)
    if obj is None:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}")
    return obj if isinstance(obj, Workflow) else Workflow(obj)


@app.callback()
def main_options(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    State.debug = debug


@app.command()
def demo(
    store: StoreOpt = None,
    kill_after: int = 3,
    live: Annotated[
        bool, typer.Option("--live", help="Call the real provider (ANTHROPIC_API_KEY or OPENAI_API_KEY).")
    ] = False,
) -> None:
    """Run the bundled panel workflow, SIGKILL it mid-run, resume it, and show what replayed."""
    from tether.cli import demo as demo_mod

    try:
        _, ref = demo_mod.demo_model(live)  # a missing key or SDK fails here, before any child runs
    except TetherError as exc:
        _fail(exc)
    url = _store(store) if store else f"sqlite:///{os.path.abspath('.tether/demo.db')}"
    if url.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(url[len("sqlite:///") :]) or ".", exist_ok=True)
    run_id = f"demo-{os.getpid()}"
    how = f"live, ceiling {demo_mod.LIVE_BUDGET_USD:.2f} USD" if live else "replayed from the bundled cassette"
    con = _console()
    con.print(
        f"[bold]1.[/bold] running the panel workflow (6 agents on {ref}, {how}) in a child process; "
        f"it is killed after {kill_after} agents settle"
    )
    child = subprocess.run(
        [sys.executable, "-m", "tether.cli.demo", url, run_id, str(kill_after), *(["--live"] if live else [])],
        capture_output=True,
        text=True,
    )
    con.print(f"   child exited with {child.returncode} (SIGKILL is -9)")
    con.print("[bold]2.[/bold] resuming from the journal")
    resumed = _run(lambda: demo_mod.resume_demo(url, run_id, live))
    outcome = resumed.outcome
    con.print(
        f"   replayed (hits): [green]{outcome.replay.hits}[/green]   ran again (misses): "
        f"[yellow]{outcome.replay.misses}[/yellow]   redispatched/reruns: {outcome.replay.reruns}"
    )
    source = "to the provider" if live else "all answered by the bundled cassette, zero network requests"
    con.print(f"   model calls made by the resume: {resumed.calls} ({source}); journal hits made none")
    con.print(f"[bold]3.[/bold] outcome: {outcome.status}, value {json.dumps(outcome.value)}")
    con.print(
        f"   cost {outcome.cost.total_usd:.6f} USD over {outcome.cost.provider_calls} provider calls; run id {run_id}"
    )
    con.print(f"   look inside: tether inspect {run_id} --store {url}")


@app.command()
def run(
    target: str,
    args: Annotated[str, typer.Option("--args", help="JSON object of workflow args.")] = "{}",
    budget: Annotated[float | None, typer.Option("--budget", help="USD ceiling.")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="Queue it for workers instead: --queue [NAME] (NAME defaults to default)."),
    ] = None,
    priority: Annotated[int, typer.Option("--priority", help="With --queue: higher runs first.")] = 0,
) -> None:
    """Run MODULE:WORKFLOW with --args JSON under an optional --budget USD (or --queue it for workers)."""

    async def go() -> Any:
        wf = _load_workflow(target)
        engine = Engine(store=_store(store))
        try:
            if queue is not None:
                return await engine.enqueue(
                    wf, json.loads(args), run_id=run_id, budget_usd=budget, queue=queue, priority=priority
                )
            return await engine.run(wf, json.loads(args), run_id=run_id, budget_usd=budget)
        finally:
            await engine.close()

    out = _run(go)
    if isinstance(out, str):
        print(json.dumps({"run_id": out, "queue": queue}) if json_out else f"{out}: queued on {queue}")
        return
    _print_outcome(out, json_out)


@app.command()
def resume(
    run_id: str,
    target: Annotated[str, typer.Option("--workflow", help="MODULE:WORKFLOW")],
    args: Annotated[str | None, typer.Option("--args")] = None,
    dry_run: bool = False,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Resume RUN_ID (the args must match the ones the run started with)."""

    async def go() -> Any:
        from tether.journal.canonical import content_key

        engine = Engine(store=_store(store))
        try:
            meta = await (await engine.store()).get_meta(run_id)
            if meta is None:
                raise ConfigError(f"no run {run_id!r} in {_store(store)}")
            parsed = json.loads(args) if args is not None else None
            if parsed is not None and content_key(parsed) != meta.args_hash:
                raise ConfigError(
                    f"--args differ from the ones run {run_id!r} started with; pass the same args (or omit --args)"
                )
            return await engine.resume(run_id, _load_workflow(target), parsed, dry_run=dry_run)
        finally:
            await engine.close()

    _print_outcome(_run(go), json_out)


def _print_outcome(out: Any, json_out: bool) -> None:
    if json_out:
        print(out.model_dump_json(exclude={"error"}))
        return
    _console().print(
        f"{out.run_id}: {out.status}  value={json.dumps(out.value, default=str)}  "
        f"cost={out.cost.total_usd:.6f} USD  hits={out.replay.hits} misses={out.replay.misses}"
    )
    if out.status in ("error", "cancelled") and out.error is not None:
        raise typer.Exit(1)


def _read(store: str | None, fn: Callable[[Engine], Awaitable[T]]) -> T:
    async def go() -> T:
        engine = Engine(store=_store(store))
        try:
            return await fn(engine)
        finally:
            await engine.close()

    return _run(go)


@app.command()
def runs(
    store: StoreOpt = None,
    json_out: JsonOpt = False,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this status (queued, running, suspended, ok, ...).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1)] = 100,
) -> None:
    """List runs in the store, newest first."""
    metas = _read(store, lambda e: e.runs(limit, status=status))
    if json_out:
        print(json.dumps([m.model_dump(mode="json", exclude={"args"}) for m in metas]))
        return
    table = Table("run id", "workflow", "status", "budget", "segments")
    for m in metas:
        table.add_row(
            m.run_id, m.workflow, m.status, "-" if m.budget_usd is None else f"{m.budget_usd:.2f}", str(m.segments)
        )
    _console().print(table)


@app.command()
def inspect(run_id: str, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Show RUN_ID's journal as a table (or --json)."""
    entries = _read(store, lambda e: e.inspect(run_id))
    if not entries:
        _console().print(f"[red]error[/red]: no run {run_id!r} in {_store(store)}")
        raise typer.Exit(1)
    if json_out:
        print(json.dumps([e.to_json_dict() for e in entries]))
        return
    table = Table("seq", "ref", "kind", "status", "scope", "label", "key", "cost", title=f"journal of {run_id}")
    for e in entries:
        table.add_row(
            str(e.seq),
            "" if e.ref is None else str(e.ref),
            e.kind,
            e.status or "",
            e.scope,
            e.label or "",
            e.key[:10],
            "" if e.cost_usd is None else f"{e.cost_usd:.6f}",
        )
    _console().print(table)


@app.command()
def cost(run_id: str, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """RUN_ID's cost report (a pure fold over its journal)."""
    report = _read(store, lambda e: e.cost(run_id))
    if json_out:
        print(report.model_dump_json())
        return
    con = _console()
    con.print(
        f"total {report.total_usd:.6f} USD over {report.provider_calls} provider calls"
        + (" (approximate)" if report.approximate else "")
    )
    for title, rows in (
        ("model", report.by_model),
        ("phase", report.by_phase),
        ("role", report.by_role),
        ("agent type", report.by_agent_type),
    ):
        for k, v in rows.items():
            con.print(f"  by {title:<10} {k:<40} {v:.6f}")
    for model, usage in report.unpriced.items():
        con.print(f"  [yellow]unpriced[/yellow] {model}: {usage.input_tokens} in / {usage.output_tokens} out tokens")


@app.command()
def resolve(run_id: str, key: str, value: str, store: StoreOpt = None) -> None:
    """Resolve suspension KEY of RUN_ID with VALUE (JSON, or a plain string)."""
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    ok = _read(store, lambda e: e.resolve_external(run_id, key, parsed))
    _console().print("resolved" if ok else "already closed (the first closer won); nothing written")


@app.command()
def abandon(run_id: str, key_or_seq: str, reason: str = "", store: StoreOpt = None) -> None:
    """Abandon a suspension (by key) or an entry (by seq) and everything under it."""
    target: str | int = int(key_or_seq) if key_or_seq.isdigit() else key_or_seq
    ok = _read(store, lambda e: e.abandon(run_id, target, reason))
    _console().print("abandoned" if ok else "nothing to abandon")


@app.command()
def ledger(run_id: str, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """RUN_ID's tool effect ledger: one row per dispatch attempt (orphans have no outcome)."""
    rows = _read(store, lambda e: e.effect_ledger(run_id))
    if json_out:
        print(json.dumps([r.model_dump(mode="json") for r in rows]))
        return
    table = Table("attempt", "tool", "executor", "outcome", "exit", "signal", "ms", "args sha256")
    for r in rows:
        table.add_row(
            r.attempt_id[:12],
            r.tool,
            r.executor,
            r.outcome or "[yellow]orphan[/yellow]",
            "" if r.exit_code is None else str(r.exit_code),
            r.signal or "",
            "" if r.duration_ms is None else f"{r.duration_ms:.0f}",
            r.args_hash[:12],
        )
    _console().print(table)


def main() -> None:
    app(args=worker_command.bare_queue_flag(sys.argv[1:]))


# Commands in their own modules register on `app` (imported last: they import from here).
from tether.cli import tree_command, worker_command  # noqa: E402, F401

if __name__ == "__main__":
    main()
