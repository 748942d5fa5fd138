"""Boolean options are plain flags everywhere: no value in the help, none accepted, and a stray yes/no names the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer
from clikit import AppDir, assert_one_line_error
from typer.core import TyperOption

from tether.cli.main import app

WIDE = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}


def _tether(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli.main", *argv], cwd=cwd, env=WIDE, capture_output=True,
                          text=True, timeout=120)


def _options_by_command() -> dict[str, list[TyperOption]]:
    group = typer.main.get_command(app)
    ctx = group.make_context("tether", ["runs"])
    commands = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}  # type: ignore[attr-defined]
    return {name: [p for p in cmd.get_params(ctx) if isinstance(p, TyperOption)] for name, cmd in commands.items()}


def test_every_boolean_option_of_every_command_is_a_flag_and_its_help_shows_no_value(appdir: AppDir) -> None:
    options = _options_by_command()
    assert {"run", "resume", "cancel", "runs", "demo", "worker", "serve", "tree"} <= set(options)
    booleans = [(name, p) for name, ps in options.items() for p in ps if p.type_descriptor.annotation is bool]
    assert len(booleans) >= 15  # --json on most commands, --force, --dry-run, --live, --allow-unpriced, --help
    assert [(name, p.opts) for name, p in booleans if not p.is_flag] == []
    for name in options:
        shown = appdir.runner.invoke(app, [name, "--help"], terminal_width=200)
        assert shown.exit_code == 0 and "--help" in shown.output, (name, shown.output)
        assert "<bool>" not in shown.output, (name, shown.output)


def test_tether_help_shows_debug_and_version_as_plain_flags(tmp_path: Path) -> None:
    shown = _tether("--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    for flag in ("--debug", "--version", "--help"):
        (line,) = [ln for ln in shown.stdout.splitlines() if f" {flag} " in ln]
        assert "<" not in line and "bool" not in line, line
    assert "<bool>" not in _tether("run", "--help", cwd=tmp_path).stdout


def test_a_flag_given_a_value_is_one_line_saying_to_drop_the_value(appdir: AppDir, tmp_path: Path) -> None:
    typed = _tether("--debug", "true", "runs", cwd=tmp_path)
    assert typed.returncode == 2 and typed.stdout == "" and len(typed.stderr.splitlines()) == 1, typed.stderr
    assert typed.stderr.strip() == ("error (usage): --debug is a flag and takes no value, so 'true' is a stray "
                                    "argument; write: tether --debug runs")
    line = assert_one_line_error(appdir("runs", "--json", "no", "--store", appdir.store), 2, "--json is a flag")
    assert line.endswith(f"write: tether runs --json --store {appdir.store} (leave --json out for off)")
    assert_one_line_error(appdir("runs", "--json=true"), 2, "'--json' does not take a value")
    # the flag alone works, before the command and after it
    appdir("run", "flows:items", "--run-id", "i1")
    assert _tether("--debug", "runs", "--json", "--store", appdir.store, cwd=appdir.path).returncode == 0
