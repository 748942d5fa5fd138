"""`tether verify`, `tether export` and `tether export-cassette`: audit records and runs turned into tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.cli.shell import JsonOpt, StoreOpt, console, emit_json, esc, plural, read_store
from tether.contracts.errors import ConfigError

if TYPE_CHECKING:
    from tether.audit.verify import Verified
    from tether.engine.engine import Engine

KeyOpt = Annotated[str | None, typer.Option("--key", help="PEM Ed25519 public key the bundle must be signed by.")]
AppOpt = Annotated[str | None, typer.Option("--app", help="MODULE:ATTR of the tether.Engine the run ran on.")]


def register(app: typer.Typer) -> None:
    app.command()(verify)
    app.command()(export)
    app.command("export-cassette")(export_cassette)


def verify(
    target: Annotated[str, typer.Argument(help="A bundle FILE (offline), or a RUN id with --store.")],
    store: StoreOpt = None,
    key: KeyOpt = None,
    head: Annotated[
        str | None, typer.Option("--head", help="The head recorded earlier (LINK or SEQ:LINK) the chain must end at.")
    ] = None,
    allow_unchained: Annotated[
        bool, typer.Option("--allow-unchained", help="Accept entries written before journals were chained.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Check a run's record: checksums, hash chain, head, cost fold (and a bundle's signature). Exit 1 names
    the first bad entry."""
    from tether.audit.bundle import verify_bundle

    if store is None and Path(target).is_file():
        verified = verify_bundle(target, key, allow_unchained=allow_unchained)
    elif store is None and _names_a_file(target):
        raise ConfigError(
            f"no bundle file {target} (the file {Path(target).absolute()} does not exist). Pass the path of a "
            f"bundle `tether export` wrote, or a RUN id with --store to check a run in its store.",
            path=target,
        )
    else:
        verified = read_store(store, lambda e: _live(e, target, head, allow_unchained))
    _report(verified, json_out)


BUNDLE_SUFFIXES = (".bundle", ".json", ".zip", ".tar", ".gz")


def _names_a_file(target: str) -> bool:
    """Whether `target` reads as a path (a separator, a bundle's suffix) rather than a run id."""
    return "/" in target or "\\" in target or target.lower().endswith(BUNDLE_SUFFIXES)


async def _live(engine: Engine, run_id: str, head: str | None, allow_unchained: bool) -> Verified:
    from tether.audit.verify import verify_store

    return await verify_store(await engine.store(), run_id, head=head, allow_unchained=allow_unchained)


def _report(verified: Verified, json_out: bool) -> None:
    if json_out:
        emit_json({"run_id": verified.run_id, "ok": True, "entries": len(verified.entries), "agents": verified.agents,
                   "total_usd": verified.cost.total_usd, "head": verified.head.to_json(), "checks": verified.checks,
                   "unchained": verified.unchained, "no_payload": verified.no_payload})
        return
    console().print(esc(verified.summary()))


def export(
    run_id: str,
    out: Annotated[Path, typer.Option("-o", "--out", help="The bundle file to write.")],
    sign: Annotated[str | None, typer.Option("--sign", help="PEM Ed25519 private key to sign the bundle with.")] = None,
    app: AppOpt = None,
    store: StoreOpt = None,
    allow_unchained: Annotated[
        bool, typer.Option("--allow-unchained", help="Export a run with entries written before journals were chained.")
    ] = False,
) -> None:
    """Write RUN_ID's self-contained audit bundle (journal, ledger, blobs, cost, prices, chain head)."""
    if app is not None:
        from tether.cli.app import resolve
        from tether.cli.shell import run_async

        engine = resolve(app=app, store=store).engine

        async def go() -> Path:
            try:
                return await engine.export(run_id, out, sign_key=sign, allow_unchained=allow_unchained)
            finally:
                await engine.close()

        path = run_async(go)
    else:
        path = read_store(store, lambda e: e.export(run_id, out, sign_key=sign, allow_unchained=allow_unchained))
    signed = f", signed with {sign}" if sign else ", unsigned"
    check = f"tether verify {path} --key PUBLIC_KEY (the public half of {sign})" if sign else f"tether verify {path}"
    console().print(f"wrote {esc(str(path))}{signed}; check it with: {esc(check)}")


def export_cassette(
    run_id: str,
    out: Annotated[Path, typer.Option("-o", "--out", help="The directory to write the cassette and its test into.")],
    workflow: Annotated[
        str | None, typer.Option("--workflow", help="MODULE:WORKFLOW the run ran (the test imports it).")
    ] = None,
    app: AppOpt = None,
    store: StoreOpt = None,
) -> None:
    """Turn a finished run into a cassette and a pytest file that replays it strictly, its model adapters offline."""
    from tether.audit.cassette import write_cassette

    doc = read_store(store, lambda e: _cassette(e, run_id, workflow, app))
    cassette, test = write_cassette(doc, out)
    hint = "" if workflow else " (set WORKFLOW in it, or export again with --workflow MODULE:WORKFLOW)"
    console().print(f"wrote {esc(str(cassette))} ({plural(len(doc['calls']), 'call')}) and {esc(str(test))}{hint}; "
                    f"run it with: pytest {esc(str(test))}")


async def _cassette(engine: Engine, run_id: str, workflow: str | None, app: str | None) -> dict[str, Any]:
    from tether.audit.cassette import build_cassette

    return await build_cassette(await engine.store(), run_id, workflow=workflow, app=app)


__all__ = ["export", "export_cassette", "register", "verify"]
