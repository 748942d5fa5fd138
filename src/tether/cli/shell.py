"""What every `tether` command shares: exit codes, one-line errors, the store option, safe printing.

Commands live in their own modules and register on the typer app through a `register(app)`
function; they import these helpers, never each other.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tether.cli.app import CommandLineError, Resolved, configured_store, resolve
from tether.contracts.errors import ConfigError, InvalidResolutionError, TetherError
from tether.engine.targets import TargetError
from tether.stores import DEFAULT_STORE_URL as DEFAULT_STORE

if TYPE_CHECKING:
    from tether.engine.engine import Engine

T = TypeVar("T")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_EXHAUSTED = 3
EXIT_SUSPENDED = 4
EXIT_CANCELLED = 5
EXIT_CANNOT_START = 6
"""A long-running command (`serve`, `worker`) could not begin its work: a busy port, an unreachable store."""
STATUS_EXIT = {
    "ok": EXIT_OK,
    "error": EXIT_ERROR,
    "exhausted": EXIT_EXHAUSTED,
    "suspended": EXIT_SUSPENDED,
    "cancelled": EXIT_CANCELLED,
    "running": EXIT_ERROR,
}
EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 error, 2 usage error, 3 exhausted (a ceiling stopped the run), "
    "4 suspended (waiting for `tether resolve`), 5 cancelled, 6 could not start (`serve`, `worker`: a busy port, "
    "an unreachable store)."
)

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help=f"Store URL (default: TETHER_STORE, else {DEFAULT_STORE} in the working directory)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (one JSON document on stdout).")]


def store_url(url: str | None) -> str:
    """The store a command uses: `--store`, else `TETHER_STORE`, else the documented default."""
    return configured_store(url)


def plural(count: int, word: str) -> str:
    """`1 call`, `2 calls`, `0 calls`."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(exc: BaseException, *, code: int = EXIT_ERROR) -> NoReturn:
    """Print one line on stderr (`error (code): message`) and exit non-zero (2 for a malformed command line
    or a value its suspension does not accept)."""
    if isinstance(exc, TetherError):
        line = f"error ({exc.code}): {exc.message}"
        code = EXIT_USAGE if isinstance(exc, TargetError | InvalidResolutionError) else code
    elif isinstance(exc, typer.TyperException):  # typer's own usage errors (unknown option, missing argument)
        line, code = f"error (usage): {exc.format_message()}", int(getattr(exc, "exit_code", EXIT_USAGE))
    else:
        line = f"error (internal): {type(exc).__name__}: {exc} (run with --debug for the traceback)"
    typer.echo(one_line(line), err=True)
    raise typer.Exit(code)


def cannot_start(command: str, why: BaseException | str) -> NoReturn:
    """`tether serve`/`tether worker` could not begin: one line on stderr, exit 6 (before any banner)."""
    if isinstance(why, TetherError):
        line = f"error ({why.code}): tether {command} could not start: {why.message}"
    else:
        line = f"error (cannot-start): tether {command} could not start: {why}"
    typer.echo(one_line(line), err=True)
    raise typer.Exit(EXIT_CANNOT_START)


def usage(message: str) -> NoReturn:
    raise CommandLineError(message)


PIPE_WIDTH = 100_000
"""The width of output into a pipe or file: wider than any line, so nothing is cut (`tether tree RUN | cat`)."""


def output_width() -> int | None:
    """`COLUMNS` when set; else the terminal's own width (None: rich asks it); else, into a pipe or file,
    no limit: a pipe has no edge to fit, so no line is cut or folded to 80 columns."""
    if os.environ.get("COLUMNS", "").strip().isdigit():
        return None  # rich reads COLUMNS itself
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stdout
        tty = False
    return None if tty else PIPE_WIDTH


def console() -> Console:
    """Human output on stdout. Anything taken from user data must go through `esc`."""
    # `:skull:` in a run id stays text
    return Console(highlight=False, soft_wrap=True, emoji=False, width=output_width())


def esc(value: Any) -> str:
    """`value` as text that rich prints literally (`[true, null]` stays `[true, null]`)."""
    return escape(str(value))


def emit_json(doc: Any) -> None:
    typer.echo(json.dumps(doc, default=str))


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the command's coroutine on a fresh event loop (errors are handled by the group)."""
    return asyncio.run(make())


def existing_store(url: str) -> str:
    """`url` if it names a store that exists; read commands never create one.

    SQLite and JSONL stores are files and directories that must be there already; a PostgreSQL
    database must exist (its tables are read as they are); `memory://` holds nothing across processes.
    """
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    where = f"the store URL {url!r}"
    if scheme == "memory":
        raise ConfigError(
            f"{where} is in-memory: it keeps runs inside one process only, so there is nothing here to read. "
            f"Pass --store with the URL the runs were written to (or set TETHER_STORE).",
            url=url,
        )
    if scheme == "sqlite" and sep:
        path = rest[1:] if rest.startswith("/") else rest
        if path and path != ":memory:" and Path(path).is_dir():
            raise ConfigError(
                f"no store at {url}: {os.path.abspath(path)} is a directory, not a SQLite file. Pass --store with "
                f"the URL the runs were written to (sqlite:///path/to/tether.db).",
                url=url,
            )
        if path and path != ":memory:" and not Path(path).is_file():
            raise ConfigError(
                f"no store at {url} (the file {os.path.abspath(path)} does not exist; nothing was created). "
                f"Pass --store with the URL the runs were written to (default {DEFAULT_STORE}, relative to "
                f"the working directory).",
                url=url,
            )
    if scheme == "jsonl" and sep and rest.strip("/") and not Path(rest).is_dir():
        raise ConfigError(
            f"no store at {url} (the directory {os.path.abspath(rest)} does not exist; nothing was created). "
            f"Pass --store with the URL the runs were written to.",
            url=url,
        )
    return url


def engine_on(url: str) -> Engine:
    """An engine on `url`; a URL tether cannot parse is a usage error."""
    from tether.engine.engine import Engine

    try:
        return Engine(store=url)
    except ConfigError as exc:
        usage(exc.message)


def read_store(store: str | None, fn: Callable[[Engine], Awaitable[T]]) -> T:
    """Run a read command's `fn` against the existing store `--store` names, then close it."""
    url = store_url(store)
    engine = engine_on(url)
    existing_store(url)

    async def go() -> T:
        try:
            return await fn(engine)
        finally:
            await engine.close()

    return run_async(go)


def parse_json_value(text: str) -> Any:
    """A JSON value, or the text itself when it is not JSON (`tether resolve run key yes`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def resolve_for_run(command: str, *, app: str | None, workflow: str | None, store: str | None) -> Resolved:
    """The engine and workflow of a command that drives an existing run (resume, fork): one of `--workflow`
    and `--app` is required, and a default engine's store must exist already."""
    if workflow is None and app is None:
        usage(f"tether {command} needs --workflow MODULE:WORKFLOW, or --app MODULE:ATTR naming an engine that "
              "registers the run's workflow")
    resolved = resolve(app=app, workflow=workflow, store=store)
    if resolved.source == "default":
        existing_store(store_url(store))
    return resolved


def parse_args(text: str | None, option: str = "--args") -> dict[str, Any] | None:
    """`--args` as a JSON object; anything else is a usage error naming what was wrong."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        usage(f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
              f"pass a JSON object, e.g. {option} '{{\"question\": \"Monorepo?\"}}'")
    if not isinstance(value, dict):
        usage(f"{option} must be a JSON object of workflow arguments, got a JSON {_json_kind(value)} "
              f"({one_line(text)[:60]}); e.g. {option} '{{\"question\": \"Monorepo?\"}}'")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "null"
