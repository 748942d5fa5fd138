"""`--help` works for every command and subcommand: help text is printed as written, never parsed as markup."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from tether.cli.main import app


def _paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        paths.extend(_paths(sub, (*prefix, name)))
    return paths


PATHS = _paths(typer.main.get_command(app))


def test_the_walk_reaches_the_subcommands() -> None:
    assert ("schedule", "add") in PATHS and ("run",) in PATHS and len(PATHS) > 10


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "tether")
def test_help_exits_zero(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, (path, result.output, result.exception)
    assert "Usage:" in result.output
    assert "error" not in result.output.splitlines()[0]


def test_brackets_in_help_are_printed_literally() -> None:
    result = CliRunner().invoke(app, ["schedule", "add", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "SCOPE=USD[/day|/hour]" in result.output
