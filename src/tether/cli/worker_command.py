"""`tether worker --app MODULE:ENGINE`: claim and drive queued runs until SIGTERM, then hand back and exit 0."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from tether.cli.app import resolve
from tether.cli.shell import StoreOpt, cannot_start
from tether.contracts.queue import DEFAULT_MAX_ATTEMPTS

if TYPE_CHECKING:
    from tether.engine.engine import Engine


def register(app: typer.Typer) -> None:
    app.command()(worker)


def worker(
    app_target: Annotated[str, typer.Option("--app", help="MODULE:ENGINE, the module's tether.Engine.")],
    queue: Annotated[
        list[str] | None, typer.Option("--queue", help="Queue to claim from (repeat for several; default: default).")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Runs this worker drives at once.")] = 8,
    store: StoreOpt = None,
    grace: Annotated[
        float, typer.Option("--grace", min=0.0, help="On SIGTERM, seconds runs may finish before they are handed back.")
    ] = 0.0,
    poll: Annotated[
        float, typer.Option("--poll", min=0.01, help="Seconds between claims when no notification comes.")
    ] = 1.0,
    worker_id: Annotated[str | None, typer.Option("--id", help="Worker id (default host:pid).")] = None,
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts", min=1,
            help="Claims of a run in a row whose worker died before it settled; then the run is dead-lettered.",
        ),
    ] = DEFAULT_MAX_ATTEMPTS,
) -> None:
    """Claim queued runs and drive them (PostgreSQL store); SIGTERM hands them back and exits 0."""
    from tether.contracts.errors import StoreUnavailableError
    from tether.worker import Worker

    engine = resolve(app=app_target, store=store).engine  # the one resolution every command uses (cli/app.py)
    runner = Worker(
        engine, queues=queue or ["default"], concurrency=concurrency, poll_s=poll, grace_s=grace, worker_id=worker_id,
        max_attempts=max_attempts,
    )

    async def reachable() -> StoreUnavailableError | None:
        """Whether the store answers, asked before the worker says it is ready (later outages are retried)."""
        try:
            await (await engine.store()).list_runs(limit=1)
        except StoreUnavailableError as exc:
            await engine.close()
            return exc
        return None

    async def main() -> None:
        unreachable = await reachable()
        if unreachable is not None:
            cannot_start("worker", unreachable)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await runner.run(stop)
        finally:
            await close_within(engine, CLOSE_S, runner.id)

    asyncio.run(main())  # a TetherError becomes one line on stderr (TetherGroup)


CLOSE_S = 1.0
"""Seconds a stopped worker waits for its store's connections to close (a stalled database never answers)."""


async def close_within(engine: Engine, timeout_s: float, worker_id: str) -> None:
    """`engine.close()`, abandoned after `timeout_s`: the process is exiting, the connections go with it."""
    closing = asyncio.ensure_future(engine.close())
    done, _ = await asyncio.wait([closing], timeout=timeout_s)
    if closing in done:
        closing.result()
        return
    print(f"worker {worker_id}: store unreachable: its connections did not close within {timeout_s:g} s; "
          f"abandoned them", flush=True)
    # What is left waits on the stalled store: cancel it (twice interrupts psycopg's own cancel of a query) and
    # collect its errors, so the exit is quiet and `asyncio.run` finds nothing to wait for.
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for _ in range(2):
        for t in leftovers:
            t.cancel()
        await asyncio.wait(leftovers, timeout=timeout_s / 2)
    for t in leftovers:
        t.add_done_callback(_quiet)
        if t.done():
            _quiet(t)


def _quiet(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()
