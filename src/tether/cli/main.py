"""The `tether` command line: the typer app, its global options, and the commands' registration.

Each command module exposes `register(app)`; `COMMAND_MODULES` lists them. Errors raised by any
command (ours or one registered with a bare `@app.command()`) are turned into one line on stderr and
an exit code by `TetherGroup`, so no command needs its own try/except.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from tether.cli.shell import (
    EXIT_CODES_HELP,
    EXIT_USAGE,
    JsonOpt,
    StoreOpt,
    console,
    fail,
    read_store,
    store_url,
)

COMMAND_MODULES = (
    "tether.cli.demo_command",
    "tether.cli.run_commands",
    "tether.cli.read_commands",
    "tether.cli.tree_command",
    # Added by their own branches; absent ones are skipped, so each lands without touching this file.
    "tether.cli.worker_command",
    "tether.cli.serve_command",
)


class TetherGroup(TyperGroup):
    """Runs a command; any error becomes one line on stderr and a non-zero exit (a traceback with --debug)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:  # `tether runs | head`: the reader left; nothing more to say
            raise typer.Exit(1) from None
        except typer.TyperException as exc:  # a usage error met while parsing the command's own arguments
            fail(exc, code=EXIT_USAGE)
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            fail(exc)


def _version() -> str:
    try:
        return version("tether")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"tether {_version()}")
        raise typer.Exit()


app = typer.Typer(
    cls=TetherGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="tether: durable, budget-bounded agent workflows.",
    epilog=EXIT_CODES_HELP,
)


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.")] = False,
    show_version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version, help="Print the version and exit.")
    ] = False,
) -> None:
    """tether: durable, budget-bounded agent workflows."""


def register_commands(target: typer.Typer) -> None:
    """Import every command module and let it register its commands on `target`."""
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        register = getattr(module, "register", None)
        if register is not None:
            register(target)


def main() -> None:
    from tether.cli.run_commands import bare_queue_flag

    app(prog_name="tether", args=bare_queue_flag(sys.argv[1:]))


# Names older command modules import from here (`from tether.cli.main import StoreOpt, _fail, ...`).
_console, _fail, _store, _read = console, fail, store_url, read_store
__all__ = ["JsonOpt", "StoreOpt", "TetherGroup", "app", "main", "register_commands"]

register_commands(app)

if __name__ == "__main__":
    # Run as `python -m tether.cli.main` this file is `__main__`; a command module that registers with a
    # bare `@app.command()` imports `tether.cli.main`, so drive that module's app, which has every command.
    from tether.cli import main as canonical

    canonical.main()
