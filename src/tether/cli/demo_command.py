"""`tether demo`: the bundled panel workflow, SIGKILLed mid-run in a child process and resumed for free."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from typing import Annotated

import typer

from tether.cli.outcome import error_view, jsonable, store_flag
from tether.cli.shell import (
    STATUS_EXIT,
    JsonOpt,
    StoreOpt,
    console,
    emit_json,
    engine_on,
    esc,
    plural,
    run_async,
    store_url,
)
from tether.contracts.money import usd


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    store: StoreOpt = None,
    kill_after: Annotated[int, typer.Option("--kill-after", help="SIGKILL the child after this many agents.")] = 3,
    live: Annotated[
        bool, typer.Option("--live", help="Call the real provider (ANTHROPIC_API_KEY or OPENAI_API_KEY).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run the bundled panel workflow, SIGKILL it mid-run, resume it, and show what replayed (offline by default)."""
    from tether.cli import demo as demo_mod

    _, ref = demo_mod.demo_model(live)  # a missing key or SDK fails here, before any child runs
    url = store_url(store)
    engine_on(url)  # a malformed store URL is refused before the child starts
    run_id = f"demo-{os.getpid()}"
    stand_in = not live and not demo_mod.replay_adapter()[1]
    con = console()
    if not json_out:
        how = (f"live, ceiling {usd(demo_mod.LIVE_BUDGET_USD)} USD" if live else "replayed from the bundled cassette"
               + (" by the fake model with Claude's capabilities, as the anthropic SDK is not installed"
                  if stand_in else ""))
        con.print(
            f"[bold]1.[/bold] running the panel workflow (6 agents on {esc(ref)}, {esc(how)}) in a child process; "
            f"it is killed after {kill_after} agents settle"
        )
    child = subprocess.run(
        [sys.executable, "-m", "tether.cli.demo", url, run_id, str(kill_after), *(["--live"] if live else [])],
        capture_output=True,
        text=True,
    )
    resumed = run_async(lambda: demo_mod.resume_demo(url, run_id, live))
    outcome = resumed.outcome
    if json_out:
        error = error_view(outcome.error)
        emit_json({
            "run_id": run_id, "store": url, "model": ref, "stand_in": stand_in, "child_exit": child.returncode,
            "status": outcome.status, "value": jsonable(outcome.value), "error": error.model_dump() if error else None,
            "replay": outcome.replay.model_dump(mode="json"), "resume_model_calls": resumed.calls,
            "cost": outcome.cost.model_dump(mode="json"),
        })
        raise typer.Exit(STATUS_EXIT.get(outcome.status, 1))
    con.print(f"   child exited with {child.returncode} (SIGKILL is -9)")
    con.print("[bold]2.[/bold] resuming from the journal")
    con.print(
        f"   replayed (hits): [green]{outcome.replay.hits}[/green]   ran again (misses): "
        f"[yellow]{outcome.replay.misses}[/yellow]   redispatched/reruns: {outcome.replay.reruns}"
    )
    source = "to the provider" if live else "all answered by the bundled cassette, zero network requests"
    con.print(f"   model calls made by the resume: {resumed.calls} ({source}); journal hits made none")
    con.print(f"[bold]3.[/bold] outcome: {esc(outcome.status)}, value {esc(json.dumps(jsonable(outcome.value)))}")
    con.print(
        f"   cost {usd(outcome.cost.total_usd)} USD over {plural(outcome.cost.provider_calls, 'provider call')}; "
        f"run id {esc(run_id)}"
    )
    flag = store_flag(url)
    con.print(f"   look inside: tether runs{esc(flag)}   tether inspect {esc(shlex.quote(run_id))}{esc(flag)}")
    raise typer.Exit(STATUS_EXIT.get(outcome.status, 1))
