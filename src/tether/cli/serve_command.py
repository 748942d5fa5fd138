"""`tether serve`: the HTTP API and the web inspector under uvicorn (needs the `server` extra)."""

from __future__ import annotations

import contextlib
import errno
import socket
from typing import Annotated

import typer

from tether.cli.app import configured_store, resolve
from tether.cli.shell import StoreOpt, cannot_start, console, esc
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
    sock = bind(host, port)  # before the banner: a busy port is one line and exit 6, not uvicorn's traceback
    try:
        resolved = resolve(app=app_target, store=store)  # the one resolution every command uses
        asgi = create_app(resolved.engine, token=token, mode="app" if resolved.source == "app" else "store",
                          owns_engine=True, allowed_hosts=hosts, **limits)
        where = f"app {app_target}" if app_target else f"store {redact(configured_store(store))}"
        console().print(f"tether serve: {esc(where)} on http://{host}:{port}/" + (" (token required)" if token else ""))
        server = uvicorn.Server(uvicorn.Config(asgi, host=host, port=port, log_level="warning"))
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it stopped on: exit 0
            server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:  # the app's startup failed (uvicorn logged why)
        cannot_start("serve", "the server did not start (see the lines above)")


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` as uvicorn binds it, or one line and exit 6 naming why it could not be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            cannot_start("serve", f"port {port} on {host} is already in use (another tether serve?); stop what "
                                  f"listens there or pick another port with --port.")
        cannot_start("serve", f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --host or "
                              f"--port.")
    return sock
