"""`tether fork`, `tether diff` and `tether plan-upgrade`: change a run and pay only for what changed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from tether.cli.app import resolve
from tether.cli.outcome import print_outcome
from tether.cli.shell import (
    JsonOpt,
    StoreOpt,
    console,
    emit_json,
    esc,
    one_line,
    parse_args,
    plural,
    read_store,
    resolve_for_run,
    run_async,
)
from tether.contracts.errors import TetherError
from tether.contracts.money import usd

if TYPE_CHECKING:
    from tether.engine.engine import Engine
    from tether.engine.fork_preview import ForkPreview
    from tether.engine.outcome import RunOutcome
    from tether.journal.diff import RunDiff
    from tether.journal.forecast import Forecast

AppOpt = Annotated[str | None, typer.Option("--app", help="MODULE:ATTR naming your tether.Engine.")]
PLAN_STATUSES = ("suspended", "queued", "running")


def register(app: typer.Typer) -> None:
    app.command()(fork)
    app.command()(diff)
    app.command("plan-upgrade")(plan_upgrade)


def fork(
    run_id: str,
    new_id: Annotated[str, typer.Option("--new-id", help="The fork's run id (a new one).")],
    app_target: AppOpt = None,
    target: Annotated[
        str | None, typer.Option("--workflow", help="MODULE:WORKFLOW: the edited code (default: the source's, "
                                 "registered on --app's engine).")
    ] = None,
    args: Annotated[str | None, typer.Option("--args", help="JSON args (default: the source's).")] = None,
    at: Annotated[int | None, typer.Option("--at", metavar="SEQ", help="Copy only the entries before SEQ and "
                                           "re-run from there (tether inspect lists the seqs).")] = None,
    model: Annotated[
        list[str] | None, typer.Option("--model", metavar="LABEL=MODEL", help="Run the agent labelled LABEL on "
                                       "adapter:model instead (repeatable).")
    ] = None,
    budget: Annotated[
        float | None, typer.Option("--budget", metavar="USD", help="The fork's ceiling on its new spend "
                                   "(default: the source's).")
    ] = None,
    preview: Annotated[bool, typer.Option("--preview", help="Run nothing, write nothing: what the fork would "
                                          "reuse, invalidate and spend.")] = False,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Fork RUN_ID into a new run that reuses every unchanged call; --preview says what it would cost first."""
    from tether.engine.fork_preview import ForkPreview

    parsed = parse_args(args)
    resolved = resolve_for_run("fork", app=app_target, workflow=target, store=store)
    engine, wf = resolved.engine, resolved.workflow

    async def go() -> RunOutcome | ForkPreview:
        try:
            if preview:
                return await engine.fork(run_id, new_id, wf, parsed, at=at, models=model, preview=True,
                                         budget_usd=budget)
            return await engine.fork(run_id, new_id, wf, parsed, at=at, models=model, budget_usd=budget)
        finally:
            await engine.close()

    result = run_async(go)
    if isinstance(result, ForkPreview):
        if json_out:
            emit_json(result.model_dump(mode="json"))
        else:
            print_preview(console(), result)
        raise typer.Exit(0)
    code = print_outcome(result, result.cost.ceiling_usd, resolved, target, json_out, source=run_id)
    raise typer.Exit(code)


def _range(f: Forecast) -> str:
    return f"{usd(f.expected_usd)} USD (min {usd(f.min_usd)}, max {usd(f.max_usd)})"


def print_preview(con: Console, p: ForkPreview) -> None:
    """A preview as lines: reused, invalidated (why), new calls with their forecast, the total against the ceiling."""
    at = f" at seq {p.at}" if p.at is not None else ""
    con.print(f"fork preview: {esc(p.source_run_id)}{at} -> {esc(p.run_id)} (workflow {esc(p.workflow)}); "
              f"nothing was run or written")
    for label, ref in p.models.items():
        con.print(f"  swap       {esc(label)} -> {esc(ref)}")
    agents = sum(1 for r in p.reused if r.kind == "agent")
    con.print(f"  reused     {plural(len(p.reused), 'call')}, {usd(p.reused_usd)} USD the source paid for its "
              f"{agents} agent call{'s' if agents != 1 else ''} (billed 0)")
    for r in p.reused:
        con.print(f"    seq {r.seq:<5} {esc(r.kind):<6} {esc(r.label or '-')}")
    con.print(f"  invalid    {plural(len(p.invalidated), 'call')}")
    for i in p.invalidated:
        detail = f": {esc(i.detail)}" if i.detail else ""
        con.print(f"    seq {i.seq:<5} {esc(i.kind):<6} {esc(i.label or '-')}  {esc('[' + i.reason + ']')}{detail} "
                  f"(source paid {usd(i.usd)})")
    con.print(f"  new        {plural(len(p.new_calls), 'call')}")
    for c in p.new_calls:
        basis = f"{c.forecast.samples} {c.forecast.basis} samples" if c.forecast.samples else "no samples"
        con.print(f"    {esc(c.label or '-'):<12} {esc(c.model):<24} {_range(c.forecast)} from {basis}")
    fits = "" if p.fits is None else ("; fits" if p.fits else "; [red]its max does not fit[/red]")
    ceiling = "no USD ceiling" if p.ceiling_usd is None else f"ceiling {usd(p.ceiling_usd)} USD{fits}"
    con.print(f"  forecast   {_range(p.forecast)}; {ceiling}")
    if p.stopped:
        con.print(f"  [yellow]stopped[/yellow]    {esc(one_line(p.stopped))}")
    for key in p.pending:
        con.print(f"  pending    {esc(key)} (the fork would wait for it)")


def diff(
    run_a: str, run_b: str, store: StoreOpt = None, json_out: JsonOpt = False,
) -> None:
    """Two runs' agent calls side by side (a fork beside its source): per agent, outputs and cost."""

    async def both(engine: Engine) -> RunDiff:
        return await engine.diff(run_a, run_b)

    d = read_store(store, both)
    if json_out:
        emit_json(d.model_dump(mode="json"))
        return
    con = console()
    con.print(f"{esc(run_a)} {usd(d.a_usd)} USD  vs  {esc(run_b)} {usd(d.b_usd)} USD new"
              + (f" + {usd(d.b_reused_usd)} reused" if d.b_reused_usd else ""))
    for c in d.calls:
        mark = "reused" if c.reused else ("same output" if c.same_output else "changed")
        a = f"{c.a.model} {usd(c.a.usd)}" if c.a else "-"
        b = f"0 (reused {usd(c.b.usd)})" if c.reused and c.b else (f"{c.b.model} {usd(c.b.usd)}" if c.b else "-")
        con.print(f"  {esc(c.label):<14} {esc(a):<28} {esc(b):<28} {mark}")
        if not c.reused and not c.same_output:
            for side, call in (("a", c.a), ("b", c.b)):
                if call is not None:
                    con.print(f"      {side}: {esc(one_line(str(call.output))[:100])}")


def plan_upgrade(
    app_target: Annotated[str, typer.Option("--app", help="MODULE:ATTR naming the engine with the NEW code.")],
    status: Annotated[str, typer.Option("--status", help="Comma-separated statuses of the runs to plan.")]
    = ",".join(PLAN_STATUSES),
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """For each unfinished run: what the new code reuses or invalidates and the forecast re-pay; nothing is written."""
    from tether.engine.fork_preview import ForkPreview

    resolved = resolve(app=app_target, store=store)
    engine = resolved.engine
    statuses = [s.strip() for s in status.split(",") if s.strip()]

    async def plans() -> list[tuple[str, ForkPreview | str]]:
        out: list[tuple[str, ForkPreview | str]] = []
        try:
            for s in statuses:
                for meta in await engine.runs(1000, status=s):
                    try:
                        out.append((meta.run_id, await engine.fork(meta.run_id, f"{meta.run_id}.plan",
                                                                   meta.workflow, preview=True)))
                    except TetherError as exc:
                        out.append((meta.run_id, exc.message))
        finally:
            await engine.close()
        return out

    found = run_async(plans)
    if json_out:
        emit_json([{**(p.model_dump(mode="json") if isinstance(p, ForkPreview) else {"error": p}), "run_id": r}
                   for r, p in found])
        return
    con = console()
    if not found:
        con.print(f"no runs in status {', '.join(statuses)}; nothing to plan")
    total = 0.0
    for run_id, p in found:
        if isinstance(p, str):
            con.print(f"{esc(run_id)}: [red]cannot plan[/red]: {esc(one_line(p))}")
            continue
        total += p.forecast.expected_usd
        con.print(f"{esc(run_id)}: {len(p.reused)} reused, {len(p.invalidated)} invalidated, {len(p.new_calls)} new; "
                  f"re-pay {_range(p.forecast)}" + (f"; stopped: {esc(one_line(p.stopped))}" if p.stopped else ""))
    if found:
        con.print(f"total expected re-pay {usd(total)} USD; nothing was written")
