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
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port (1-65535).")] = 8642,
    token: Annotated[
        str | None, typer.Option("--token", envvar="TETHER_TOKEN", help="Bearer token every route but /healthz needs.")
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option("--allowed-host", help="Also answer requests for this Host name (repeatable; '*.example.org' "
                     "for names under it, '*' for any). localhost, IP addresses and --host are always answered."),
    ] = None,
    max_body_bytes: Annotated[
        int | None, typer.Option("--max-body-bytes", help="Largest request body accepted, in bytes (default 1 MiB); "
                                 "bigger ones get 413.")
    ] = None,
    max_streams: Annotated[
        int | None, typer.Option("--max-streams", help="Concurrent event streams served (default 32); more get 503.")
    ] = None,
) -> None:
    """Serve the JSON API (OpenAPI at /api/openapi.json) and the inspector at / for an app engine or a store."""
    from tether.stores.postgres import redact

    try:
        import uvicorn

        from tether.server import check_bind, create_app
        from tether.server.hosts import HostPolicy
        from tether.server.limits import check_limits
    except ImportError as exc:
        raise ConfigError(
            f"tether serve needs the server extra ({exc.name} is missing): pip install 'tether[server]'"
        ) from None
    check_bind(host, token)  # before the app is imported: a refused option never runs user code
    hosts = [*(allowed_host or ()), host]  # the name it binds is a name it answers to
    HostPolicy(hosts)
    limits = {k: v for k, v in (("max_body_bytes", max_body_bytes), ("max_streams", max_streams)) if v is not None}
    check_limits(**limits)
    resolved = resolve(app=app_target, store=store)  # the one resolution every command uses
    asgi = create_app(resolved.engine, token=token, mode="app" if resolved.source == "app" else "store",
                      owns_engine=True, allowed_hosts=hosts, **limits)
    where = f"app {app_target}" if app_target else f"store {redact(configured_store(store))}"
    console().print(f"tether serve: {esc(where)} on http://{host}:{port}/" + (" (token required)" if token else ""))
    uvicorn.run(asgi, host=host, port=port, log_level="warning")
