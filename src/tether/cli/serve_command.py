"""`tether serve`: the HTTP API and the web inspector under uvicorn (needs the `server` extra)."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.cli.app import configured_store, resolve
from tether.cli.shell import StoreOpt, console, esc
from tether.contracts.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command()(serve)


def serve(
    app_target: Annotated[
        str | None, typer.Option("--app", help="MODULE:ENGINE: serve this application's engine (runs can start here).")
    ] = None,
    store: StoreOpt = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (off loopback needs --token).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8642,
    token: Annotated[
        str | None, typer.Option("--token", envvar="TETHER_TOKEN", help="Bearer token every route but /healthz needs.")
    ] = None,
) -> None:
    """Serve the JSON API (OpenAPI at /api/openapi.json) and the inspector at / for an app engine or a store."""
    try:
        import uvicorn

        from tether.server import check_bind, create_app
    except ImportError as exc:
        raise ConfigError(
            f"tether serve needs the server extra ({exc.name} is missing): pip install 'tether[server]'"
        ) from None
    check_bind(host, token)  # before the app is imported: a refused bind never runs user code
    resolved = resolve(app=app_target, store=store)  # the one resolution every command uses
    asgi = create_app(resolved.engine, token=token, mode="app" if resolved.source == "app" else "store",
                      owns_engine=True)
    where = f"app {app_target}" if app_target else f"store {configured_store(store)}"
    console().print(f"tether serve: {esc(where)} on http://{host}:{port}/" + (" (token required)" if token else ""))
    uvicorn.run(asgi, host=host, port=port, log_level="warning")
