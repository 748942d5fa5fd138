"""`tether delete`, `tether sweep`, `tether store stats` and `tether store compact`: what a store keeps, and for how
long (docs/retention.md). Heavy modules are imported inside the commands."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from tether.cli.shell import EXIT_USAGE, JsonOpt, StoreOpt, console, emit_json, esc, fail, plural, read_store, usage
from tether.contracts.errors import RunActiveError

if TYPE_CHECKING:
    from tether.contracts.retention import CompactResult, StoreStats
    from tether.engine.engine import Engine
    from tether.engine.retention import DeleteReport, SweepReport

store_app = typer.Typer(help="What the store holds (stats) and giving its free space back (compact).",
                        no_args_is_help=True)
_AGO = re.compile(r"(\d+(?:\.\d+)?)([dhm])")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0}


def register(app: typer.Typer) -> None:
    app.command()(delete)
    app.command()(sweep)
    app.add_typer(store_app, name="store")
    store_app.command("stats")(stats)
    store_app.command("compact")(compact)


def parse_before(text: str, now: float | None = None) -> float:
    """`--before`: an ISO date or time (UTC unless it names a zone: 2026-01-31, 2026-01-31T12:00) or an age (30d,
    12h, 90m: that long before now), as a Unix time."""
    ago = _AGO.fullmatch(text.strip())
    if ago is not None:
        return (time.time() if now is None else now) - float(ago.group(1)) * _UNIT_S[ago.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        usage(f"--before {text!r} is neither a date (2026-01-31, 2026-01-31T12:00, UTC unless it names a zone) nor "
              f"an age (30d, 12h, 90m)")
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, step in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} B"


def _rows(rows: dict[str, int]) -> str:
    return ", ".join(f"{n} {table}" for table, n in rows.items() if n) or "no rows"


def delete(
    run_id: str,
    force: Annotated[bool, typer.Option("--force", help="Delete it even if running, queued or suspended.")] = False,
    with_forks: Annotated[bool, typer.Option("--with-forks", help="Delete the runs forked from it too.")] = False,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete RUN_ID with every row and child run it owns, at once; its forks stay whole (unless --with-forks).
    Exit 2, nothing deleted, when it is running, queued or suspended (pass --force)."""

    async def go(engine: Engine) -> DeleteReport:
        return await engine.delete(run_id, force=force, with_forks=with_forks)

    try:
        report = read_store(store, go)
    except RunActiveError as exc:
        fail(exc, code=EXIT_USAGE)
    if json_out:
        emit_json(report.model_dump(mode="json"))
        return
    con = console()
    others = [r for r in report.deleted if r != run_id]
    con.print(f"deleted run {esc(run_id)}" + (f" and {plural(len(others), 'run')} it owned or forked: "
                                              f"{esc(', '.join(others))}" if others else "")
              + f" ({_rows(report.rows)})")
    for fork in report.forks_kept:
        con.print(f"kept fork {esc(fork)} whole (tether delete {esc(run_id)} --with-forks deletes forks too)")
    if report.kept_blobs:
        con.print(f"kept {plural(len(report.kept_blobs), 'blob')} of {esc(run_id)} that the forks' copied agent "
                  f"calls vouch for")


def sweep(
    before: Annotated[str, typer.Option("--before", metavar="DATE", help="Delete runs last updated before DATE: "
                                        "2026-01-31, 2026-01-31T12:00 (UTC), or an age (30d, 12h).")],
    status: Annotated[list[str] | None, typer.Option("--status", help="Only runs in this status (repeatable; "
                                                     "ok, error, cancelled, exhausted, dead).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete every settled run last updated before DATE, with what it owns; running, queued and suspended runs are
    skipped and named (tether delete RUN --force removes one)."""
    from tether.engine import retention

    cutoff = parse_before(before)
    statuses = {s.strip() for item in status or [] for s in item.split(",") if s.strip()} or None

    async def go(engine: Engine) -> SweepReport:
        return await retention.sweep(await engine.store(), before=cutoff, statuses=statuses, dry_run=dry_run)

    report = read_store(store, go)
    if json_out:
        emit_json(report.model_dump(mode="json"))
        return
    con = console()
    verb = "would delete" if dry_run else "deleted"
    con.print(f"{verb} {plural(len(report.deleted), 'run')} last updated before {_when(cutoff)}"
              + ("" if dry_run else f" ({_rows(report.rows)})") + (":" if report.deleted else ""))
    for run_id in report.deleted:
        con.print(f"  {esc(run_id)}")
    for skipped in report.skipped:
        con.print(f"skipped {esc(skipped.run_id)}: {esc(skipped.reason)}")
    if dry_run:
        con.print("dry run: nothing was deleted")


def stats(
    largest: Annotated[int, typer.Option("--largest", help="How many of the largest runs to list.")] = 5,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What the store holds: runs, journal entries, bytes, the largest runs and the blobs."""
    from tether.engine import retention

    async def go(engine: Engine) -> StoreStats:
        return await retention.store_stats(await engine.store(), largest=largest)

    s = read_store(store, go)
    if json_out:
        emit_json(s.model_dump(mode="json"))
        return
    con = console()
    con.print(f"{s.store} store: {plural(s.runs, 'run')}, {s.entries} journal entries, "
              f"{plural(s.effects, 'effect row')}, {plural(s.blobs, 'blob')} ({_size(s.blob_bytes)}); "
              f"{_size(s.bytes)} of records")
    if s.on_disk_bytes is not None:
        free = "" if not s.reclaimable_bytes else f", {_size(s.reclaimable_bytes)} free (tether store compact)"
        con.print(f"on disk: {_size(s.on_disk_bytes)}{free}")
    if s.largest:
        con.print("largest runs:")
    for r in s.largest:
        con.print(f"  {esc(r.run_id)}  {r.entries} entries  {_size(r.bytes)}")


def compact(store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Give the store's free space back: VACUUM on SQLite and PostgreSQL; a JSONL store has none to give."""
    from tether.engine import retention

    async def go(engine: Engine) -> CompactResult:
        return await retention.compact(await engine.store())

    result = read_store(store, go)
    if json_out:
        emit_json(result.model_dump(mode="json"))
        return
    sizes = "" if result.before_bytes is None else f": {_size(result.before_bytes)} -> {_size(result.after_bytes)}"
    console().print(f"{result.store} store: {esc(result.action)}{sizes}")
