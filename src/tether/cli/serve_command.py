"""`tether serve`: the HTTP API and the web inspector under uvicorn (needs the `server` extra)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from tether.cli.main import StoreOpt, _console, _fail, _store, app
from tether.contracts.errors import ConfigError, TetherError
from tether.engine.engine import Engine


@app.command()
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
        _fail(ConfigError(f"tether serve needs the server extra ({exc.name} is missing): pip install 'tether[server]'"))
    try:
        check_bind(host, token)
        engine, mode = _engine(app_target, store)
    except TetherError as exc:
        _fail(exc)

    asgi = create_app(engine, token=token, mode=mode, owns_engine=True)
    where = f"app {app_target}" if app_target else f"store {_store(store)}"
    _console().print(f"tether serve: {where} on http://{host}:{port}/" + (" (token required)" if token else ""))
    uvicorn.run(asgi, host=host, port=port, log_level="warning")


def _engine(app_target: str | None, store: str | None) -> tuple[Engine, Literal["app", "store"]]:
    if app_target is not None and store is not None:
        raise ConfigError("pass --app MODULE:ENGINE or --store URL, not both (the app's engine names its own store)")
    if app_target is not None:
        from tether.cli.app import load_engine

        return load_engine(app_target), "app"
    return Engine(store=_store(store)), "store"
