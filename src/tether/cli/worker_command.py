"""`tether worker --app MODULE:ENGINE`: claim and drive queued runs until SIGTERM, then hand back and exit 0."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
from typing import Annotated

import typer

from tether.cli.main import StoreOpt, _fail, app
from tether.contracts.errors import ConfigError, TetherError
from tether.engine.engine import Engine


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


def load_app_engine(target: str) -> Engine:
    """The `tether.Engine` at MODULE:ATTR, imported with the working directory first on `sys.path`."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app {target!r} must be MODULE:ENGINE, e.g. --app myapp.engine:engine", target=target)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"--app {target!r}: cannot import {module_name!r} ({exc}); run from the directory that holds it or "
            f"install it",
            target=target,
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"--app {target!r}: {module_name!r} has no attribute {attr!r}", target=target)
        obj = getattr(obj, part)
    if not isinstance(obj, Engine):
        raise ConfigError(
            f"--app {target!r} is a {type(obj).__name__}, not a tether.Engine; point it at the Engine instance",
            target=target,
        )
    return obj


@app.command()
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
) -> None:
    """Claim queued runs and drive them (PostgreSQL store); SIGTERM hands them back and exits 0."""
    from tether.worker import Worker

    try:
        engine = load_app_engine(app_target)
        url = store or os.environ.get("TETHER_STORE")
        if url:
            engine.use_store(url)
        runner = Worker(
            engine, queues=queue or ["default"], concurrency=concurrency, poll_s=poll, grace_s=grace,
            worker_id=worker_id,
        )
    except TetherError as exc:
        _fail(exc)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await runner.run(stop)
        finally:
            await engine.close()

    try:
        asyncio.run(main())
    except TetherError as exc:
        _fail(exc)
