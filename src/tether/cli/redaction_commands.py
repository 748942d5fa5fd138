"""`tether archive` and `tether redact`: remove a run's texts while its record still verifies (docs/retention.md).
Heavy modules are imported inside the commands."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated

import typer

from tether.cli.shell import EXIT_USAGE, JsonOpt, StoreOpt, console, emit_json, esc, fail, plural, read_store, usage
from tether.contracts.errors import RunActiveError, RunRetainedError

if TYPE_CHECKING:
    from tether.engine.engine import Engine
    from tether.engine.redaction import RetentionReport

WhyOpt = Annotated[str | None, typer.Option("--why", help="Why (journaled with who and when in the decision).")]


def register(app: typer.Typer) -> None:
    app.command()(archive)
    app.command()(redact)


def archive(run_id: str, why: WhyOpt = None, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Empty every text of RUN_ID and the runs it owns (outputs, transcripts, args); numbers, statuses, costs,
    digests and the hash chain stay, so tether verify and tether cost still agree. It can no longer resume."""
    from tether.engine import redaction

    async def go(engine: Engine) -> RetentionReport:
        return await redaction.archive(engine, run_id, why=why)

    _show(_call(store, go), json_out)


def redact(
    run_id: str,
    match: Annotated[str | None, typer.Option("--match", help="Remove every payload holding this text.")] = None,
    seq: Annotated[int | None, typer.Option("--seq", help="Remove this entry's payload (and its transcript).")] = None,
    why: WhyOpt = None,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove one text (--match) or one entry's payload (--seq) from RUN_ID everywhere the store keeps it, journaled
    as a decision (who, when, why); the chain still verifies. Exit 2, nothing changed, when it cannot be done."""
    from tether.engine import redaction

    if (match is None) == (seq is None):
        usage("pass one of --match TEXT or --seq N")

    async def go(engine: Engine) -> RetentionReport:
        return await redaction.redact(engine, run_id, match=match, seq=seq, why=why)

    _show(_call(store, go), json_out)


def _call(store: str | None, go: Callable[[Engine], Awaitable[RetentionReport]]) -> RetentionReport:
    try:
        return read_store(store, go)
    except (RunActiveError, RunRetainedError) as exc:
        fail(exc, code=EXIT_USAGE)


def _show(report: RetentionReport, json_out: bool) -> None:
    if json_out:
        emit_json(report.model_dump(mode="json"))
        return
    con = console()
    verb = "archived" if report.decision == "archive" else "redacted"
    if not report.decisions:
        con.print(f"nothing of run {esc(report.run_id)} to {report.decision}: no payload holds it")
    for run_id, at in report.decisions.items():
        gone = report.entries.get(run_id, [])
        con.print(f"{verb} run {esc(run_id)}: {plural(len(gone), 'entry payload')} removed"
                  + (f" (seq {', '.join(map(str, gone))})" if gone else "")
                  + f"; journaled as decision seq {at} by {esc(report.by)}")
    if report.blobs:
        con.print(f"  {plural(len(report.blobs), 'checkpoint blob')} emptied (their digests kept)")
    if report.metas:
        con.print(f"  args removed from the meta of {esc(', '.join(report.metas))} (their hash kept)")
    if report.effects:
        con.print(f"  {plural(report.effects, 'effect row')} scrubbed")
    for run_id, seqs in report.kept.items():
        con.print(f"  kept seq {', '.join(map(str, seqs))} of {esc(run_id)} whole: written before payloads were "
                  f"committed by digest (tether delete removes them)")
