"""The `tether` command line: the typer app, its global options, and the commands' registration.

Each command module exposes `register(app)`; `COMMAND_MODULES` lists them. Errors raised by any
command (ours or one registered with a bare `@app.command()`) are turned into one line on stderr and
an exit code by `TetherGroup`, so no command needs its own try/except.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from tether.cli.app import CommandLineError
from tether.cli.shell import (
    EXIT_CODES_HELP,
    EXIT_USAGE,
    JsonOpt,
    StoreOpt,
    console,
    fail,
    one_line,
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
    "tether.cli.schedule_commands",
    "tether.cli.serve_command",
    "tether.cli.fork_commands",
    "tether.cli.audit_commands",
    "tether.cli.retention_commands",
    "tether.cli.session_commands",
    "tether.cli.estimate_command",
    "tether.cli.redaction_commands",
)


FLAG_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"})
"""Words someone may put after a flag (`--json true`); a flag takes no value, so they are stray arguments."""


def plain_flags(params: Iterable[Any]) -> None:
    """Show boolean options as plain flags in the help (`--json`, not `--json <bool>`).

    typer's rich help prints every option's type, a flag's too, as if it took a value; an option's
    metavar is shown instead of its type, and a flag never shows one otherwise, so an empty one hides it.
    """
    for param in params:
        if isinstance(param, TyperOption) and (param.is_flag or param.count) and param.metavar is None:
            param.metavar = ""


def flag_value_hint(command: Any, ctx: Any, argv: list[str], message: str) -> str | None:
    """For `tether --debug true runs`: a usage error whose stray word is a yes/no after a flag names the fix."""
    flags = {
        opt
        for cmd in (command, *command.commands.values())
        for p in cmd.get_params(ctx)
        if isinstance(p, TyperOption) and p.is_flag
        for opt in (*p.opts, *p.secondary_opts)
    }
    for i in range(1, len(argv)):
        flag, word = argv[i - 1], argv[i]
        if flag in flags and word.lower() in FLAG_WORDS and word in message:
            fixed = shlex.join([*argv[:i], *argv[i + 1:]])
            off = f" (leave {flag} out for off)" if word.lower() in ("false", "no", "off", "0", "n", "f") else ""
            return f"{flag} is a flag and takes no value, so {word!r} is a stray argument; write: tether {fixed}{off}"
    return None


class TetherGroup(TyperGroup):
    """Runs a command; any error becomes one line on stderr and a non-zero exit (a traceback with --debug)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._argv: list[str] = []

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        self._argv = list(args)  # what was typed, for the usage-error hint
        return super().make_context(info_name, args, parent, **extra)

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        plain_flags(params)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            plain_flags(command.get_params(ctx))
        return command

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:  # `tether runs | head`: the reader left; nothing more to say
            raise typer.Exit(1) from None
        except typer.TyperException as exc:  # a usage error met while parsing the command's own arguments
            hint = flag_value_hint(self, ctx, self._argv, one_line(exc.format_message()))
            fail(CommandLineError(hint) if hint else exc, code=EXIT_USAGE)
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
    rich_markup_mode=None,  # help text is printed as written: `SCOPE=USD[/day|/hour]` is not markup
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
