"""The read side over an existing store: `runs`, `inspect`, `cost`, `ledger`, and closing suspensions.

None of these creates a store: a `--store` that names nothing is an error, not an empty table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.cli.cost_view import lost_lines, orphan_line, reused_line, total_phrase
from tether.cli.shell import JsonOpt, StoreOpt, console, emit_json, esc, parse_json_value, plural, read_store
from tether.cli.tables import Column, WideOpt, fit, print_fitted
from tether.contracts.money import usd

if TYPE_CHECKING:
    from tether.contracts.entries import JournalEntry, RunMeta
    from tether.engine.engine import Engine
    from tether.journal.cost import CostReport


FINISHED = ("ok", "error", "cancelled")
"""Statuses `tether resume` has nothing to go on with (an `exhausted` run goes on under a lower figure)."""


def register(app: typer.Typer) -> None:
    for command in (runs, inspect, cost, ledger, resolve, abandon):
        app.command()(command)
    app.command("settle-orphans")(settle_orphans)


def runs(
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 100,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this status (queued, running, suspended, ok, ...).")
    ] = None,
    store: StoreOpt = None,
    wide: WideOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """List the store's runs, newest first, with what each spent against its ceiling."""

    async def listing(engine: Engine) -> list[tuple[RunMeta, CostReport]]:
        metas = await engine.runs(limit, status=status)
        return [(m, await engine.cost(m.run_id)) for m in metas]

    found = read_store(store, listing)
    if json_out:
        emit_json([{**m.model_dump(mode="json", exclude={"args"}), **_spend(m, c)} for m, c in found])
        return
    orphans = any(c.orphaned_usd or c.orphaned_calls for _, c in found)
    forecasts = [_forecast(m) for m, _ in found]
    judged = any(f is not None for f in forecasts)
    columns = [Column("run id"), Column("workflow", drop=2), Column("status"), Column("spent", justify="right"),
               *([Column("orphaned", justify="right")] if orphans else []), Column("budget", justify="right"),
               *([Column("forecast p95", drop=3, justify="right")] if judged else []),
               Column("segments", drop=1, justify="right")]
    rows = []
    for (m, c), f in zip(found, forecasts, strict=True):
        budget = _spend(m, c)["budget_usd"]
        rows.append([esc(m.run_id), esc(m.workflow), esc(m.status), usd(c.spent_usd),
                     *([usd(c.orphaned_usd) if c.orphaned_usd else ""] if orphans else []),
                     "-" if budget is None else usd(budget), *([f or "-"] if judged else []), str(m.segments)])
    con = console()
    print_fitted(con, fit(con, columns, rows, wide=wide))
    for m, _ in found:
        waiting = (m.model_extra or {}).get("waiting")
        if m.status == "queued" and waiting:
            con.print(f"{esc(m.run_id)} waits: {esc(waiting)}")
    if orphans:
        con.print("[dim]orphaned: calls a crash cut off, at their worst case; spent + orphaned counts against the "
                  "budget (tether cost RUN_ID itemizes it)[/dim]")


def _forecast(meta: RunMeta) -> str | None:
    """The P95 of the forecast a `forecast_gate` judged the run by (`over` when it was over its limit)."""
    from tether.engine.forecasting import JudgedForecast

    raw = (meta.model_extra or {}).get("forecast")
    if not isinstance(raw, dict):
        return None
    f = JudgedForecast.model_validate(raw)
    if not f.enough or f.p95_usd is None:
        return "too few runs"
    return usd(f.p95_usd) + (" over" if f.over else "")


def _spend(meta: RunMeta, report: CostReport) -> dict[str, float | None]:
    """A run's figures from the cost fold `tether cost` prints (same names), and its ceiling as it stands now."""
    ceiling = report.ceiling_usd if report.ceiling_usd is not None else meta.budget_usd
    return {"budget_usd": ceiling, "spent_usd": report.spent_usd, "orphaned_usd": report.orphaned_usd,
            "total_usd": report.total_usd, "reused_usd": report.reused_usd}


def inspect(run_id: str, store: StoreOpt = None, wide: WideOpt = False, json_out: JsonOpt = False) -> None:
    """RUN_ID's journal, one row per entry (a dispatch a crash cut off is marked `cut`, a fork's copies `reused`
    or `not reached`), then the cost report's totals."""
    from tether.journal.cost import cost_report, fold_spend

    entries = read_store(store, lambda e: e.inspect(run_id))
    if json_out:
        emit_json([e.to_json_dict() for e in entries])
        return
    folded = fold_spend(entries)
    report = cost_report(folded)
    cut = {seq for spend in folded.agents for seq in spend.cut_seqs}
    by_seq: dict[int, bool] = {}  # a fork's copied agent calls (running seq, agent id) -> reused
    by_agent: dict[int, bool] = {}
    for spend in folded.agents:
        if folded.copied(spend):
            by_seq[spend.running.seq or 0] = folded.reused(spend)
            if spend.running.agent_id is not None:
                by_agent[spend.running.agent_id] = folded.reused(spend)
    columns = [Column("seq", justify="right"), Column("ref", drop=2, justify="right"), Column("kind"),
               Column("status"), Column("scope", drop=3), Column("label"), Column("key", drop=1),
               Column("cost", justify="right")]
    rows = []
    for e in entries:
        label = esc(e.label or "")
        if e.seq in cut:
            label += " [yellow](cut: charged at its worst case)[/yellow]"
        copied = by_seq.get((e.ref if e.ref is not None else e.seq) or 0) if e.kind == "agent" else (
            by_agent.get(e.agent_id) if e.agent_id is not None else None)
        if copied is not None and (e.seq or 0) <= folded.copied_through:
            label += " [cyan](reused: the source paid)[/cyan]" if copied else " [dim](copied, not reached)[/dim]"
        rows.append([str(e.seq), "" if e.ref is None else str(e.ref), e.kind, esc(e.status or ""), esc(e.scope),
                     label, e.key[:10], _entry_cost(e)])
    con = console()
    print_fitted(con, fit(con, columns, rows, title=f"journal of {esc(run_id)}", wide=wide))
    con.print(f"total {esc(total_phrase(report))}")
    reused = reused_line(report, _source(entries))
    if reused:
        con.print(f"reused {esc(reused)}")


def _source(entries: list[JournalEntry]) -> str | None:
    from tether.journal.lineage import lineage_of

    lineage = lineage_of(entries[:1])
    return lineage.forked_from if lineage is not None else None


def _entry_cost(e: JournalEntry) -> str:
    """An entry's USD: a terminal's cost, a dispatch record's worst case (`<= x`)."""
    from tether.journal.cost import dispatch_value

    if e.cost_usd is not None:
        return usd(e.cost_usd)
    worst = (dispatch_value(e) or {}).get("worst_usd")
    return f"<= {usd(float(worst))}" if isinstance(worst, int | float) else ""


def cost(run_id: str, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """RUN_ID's cost report (a pure fold over its journal): spent and orphaned apart, against the ceiling; a fork's
    reuse apart from its own spend; calls paid and lost to a kill listed."""
    from tether.journal.cost import cost_report, fold_spend

    entries = read_store(store, lambda e: e.inspect(run_id))
    report = cost_report(fold_spend(entries))
    if json_out:
        emit_json(report.model_dump(mode="json"))
        return
    con = console()
    con.print(
        f"total {total_phrase(report)} over {plural(report.provider_calls, 'provider call')}"
        + (" (approximate)" if report.approximate else "")
    )
    con.print(f"  spent    {usd(report.spent_usd)} USD (what settled calls cost)")
    orphaned = orphan_line(report, run_id)
    con.print(f"  orphaned {esc(orphaned) if orphaned else '0.00 USD (no call was cut off)'}")
    reused = reused_line(report, _source(entries))
    if reused:
        con.print(f"  reused   {esc(reused)}")
    for line in lost_lines(report):
        con.print(f"  lost     {esc(line)}")
    if report.compaction_calls:
        calls = plural(report.compaction_calls, "summarize call")
        con.print(f"  compaction {usd(report.compaction_usd)} USD over {calls} keeping contexts in limit (in spent)")
    for title, rows in (
        ("model", report.by_model),
        ("phase", report.by_phase),
        ("role", report.by_role),
        ("agent type", report.by_agent_type),
    ):
        for k, v in rows.items():
            con.print(f"  by {title:<10} {esc(k):<40} {usd(v)}")
    for model, usage in report.unpriced.items():
        con.print(
            f"  [yellow]unpriced[/yellow] {esc(model)}: {usage.input_tokens} in / {usage.output_tokens} out tokens"
        )


def ledger(run_id: str, store: StoreOpt = None, wide: WideOpt = False, json_out: JsonOpt = False) -> None:
    """RUN_ID's tool effect ledger: one row per dispatch attempt (orphans have no outcome)."""
    records = read_store(store, lambda e: e.effect_ledger(run_id))
    if json_out:
        emit_json([r.model_dump(mode="json") for r in records])
        return
    columns = [Column("attempt"), Column("tool"), Column("executor", drop=3), Column("outcome"),
               Column("exit", justify="right"), Column("ms", drop=2, justify="right"), Column("args sha256", drop=1)]
    rows = []
    for r in records:
        rows.append([
            esc(r.attempt_id),
            esc(r.tool),
            esc(r.executor),
            esc(r.outcome) if r.outcome else "[yellow]orphan[/yellow]",
            esc(r.signal) if r.signal else ("" if r.exit_code is None else str(r.exit_code)),
            "" if r.duration_ms is None else f"{r.duration_ms:.0f}",
            r.args_hash[:12],
        ])
    con = console()
    print_fitted(con, fit(con, columns, rows, wide=wide))


def resolve(
    run_id: str,
    key: str,
    value: Annotated[str, typer.Argument(help="JSON, or plain text taken as a string; a tool approval takes "
                                         "exactly allow or deny.")],
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Resolve suspension KEY of RUN_ID with VALUE; `tether resume` then continues the run.

    A tool approval (`approval:...`) takes exactly `allow` or `deny`; a mistyped KEY lists the open ones.
    """
    from tether.engine.resolutions import check_value, find_open

    parsed: Any = parse_json_value(value)

    async def close(engine: Engine) -> bool:
        suspension = find_open(await engine.inspect(run_id), run_id, key)
        if suspension is not None:
            check_value(suspension, parsed, run_id)
        return await engine.resolve_external(run_id, key, parsed)

    ok = read_store(store, close)
    if json_out:
        emit_json({"run_id": run_id, "key": key, "resolved": ok})
        return
    console().print("resolved" if ok else "already closed (the first closer won); nothing written")


def abandon(
    run_id: str,
    key_or_seq: str,
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the abandon entry.")] = "",
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Abandon a suspension (by key) or an entry (by seq) and everything scoped under it."""
    target: str | int = int(key_or_seq) if key_or_seq.isdigit() else key_or_seq
    ok = read_store(store, lambda e: e.abandon(run_id, target, reason))
    if json_out:
        emit_json({"run_id": run_id, "target": target, "abandoned": ok})
        return
    console().print("abandoned" if ok else "nothing to abandon")


def settle_orphans(
    run_id: str,
    usd: Annotated[float, typer.Option("--usd", min=0, help="What the provider billed for the cut calls (USD).")],
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the decision (e.g. the invoice line).")] = "",
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Replace the worst-case charge of RUN_ID's calls a crash cut off with what the provider billed for them."""
    from tether.contracts import money

    async def settle(engine: Engine) -> tuple[CostReport, str]:
        report = await engine.settle_orphans(run_id, usd, reason)
        return report, (await engine.run_meta(run_id)).status

    report, status = read_store(store, settle)
    if json_out:
        emit_json(report.model_dump(mode="json"))
        return
    settled = report.settlement
    assert settled is not None
    console().print(
        f"settled {settled.calls} cut call{'s' if settled.calls != 1 else ''} of {esc(run_id)} at "
        f"{money.usd(settled.usd)} USD (was {money.usd(settled.old_usd)});"
        f" total now {total_phrase(report)}. "
        + (f"The run is {esc(status)}: its cost report shows the new figure." if status in FINISHED
           else f"`tether resume {esc(run_id)}` goes on under the new figure.")
    )
