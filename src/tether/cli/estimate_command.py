"""`tether estimate MODULE:WORKFLOW`: what a run will likely cost, from the workflow's past runs (docs/cli.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tether.cli.app import resolve
from tether.cli.shell import JsonOpt, StoreOpt, console, emit_json, esc, parse_args, run_async
from tether.contracts.money import usd

if TYPE_CHECKING:
    from tether.engine.forecasting import Forecast


def register(app: typer.Typer) -> None:
    app.command()(estimate)


def estimate(
    target: Annotated[str, typer.Argument(metavar="MODULE:WORKFLOW", help="The workflow to forecast.")],
    args: Annotated[str | None, typer.Option("--args", help="JSON object of workflow args.")] = None,
    runs: Annotated[int, typer.Option("--runs", min=1, help="Rest on at most this many of the newest runs.")] = 40,
    app_target: Annotated[str | None, typer.Option("--app", help="MODULE:ATTR naming your tether.Engine.")] = None,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """P50/P90/P95 of a run's cost, provider calls and tokens, from past settled runs of the same code."""
    parsed = parse_args(args) or {}
    resolved = resolve(app=app_target, workflow=target, store=store)
    wf = resolved.workflow
    assert wf is not None

    async def go() -> Forecast:
        try:
            return await resolved.engine.forecast(wf, parsed, runs=runs)
        finally:
            await resolved.engine.close()

    f = run_async(go)
    if json_out:
        emit_json({**f.model_dump(mode="json"), "summary": f.summary()})
        return
    out = console()
    out.print(f"{esc(f.workflow)} (code {esc(f.code_hash)}): {esc(f.summary())}")
    if f.enough and f.cost_usd is not None and f.calls is not None and f.tokens is not None:
        out.print(f"  cost USD  P50 {usd(f.cost_usd.p50)}  P90 {usd(f.cost_usd.p90)}  P95 {usd(f.cost_usd.p95)}")
        out.print(f"  calls     P50 {f.calls.p50:g}  P90 {f.calls.p90:g}  P95 {f.calls.p95:g}")
        out.print(f"  tokens    P50 {f.tokens.p50:g}  P90 {f.tokens.p90:g}  P95 {f.tokens.p95:g}")
    if f.other_code_runs:
        what = "scaled by the preview" if f.basis == "preview" else "left out"
        out.print(f"  {f.other_code_runs} run(s) of other versions of the code: {what}")
