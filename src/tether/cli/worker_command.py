"""`tether worker --app MODULE:ENGINE`: claim and drive queued runs until SIGTERM, then hand back and exit 0."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from tether.cli.app import resolve
from tether.cli.shell import StoreOpt, cannot_start
from tether.contracts.queue import DEFAULT_MAX_ATTEMPTS


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
            await engine.close()

    asyncio.run(main())  # a TetherError becomes one line on stderr (TetherGroup)
