"""What a `tether` command costs to start: it never imports the server, OpenTelemetry, a database driver or an SDK it
does not use, and `--version` and `--help` import no part of the engine (each command imports what it needs when run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOT_AT_STARTUP = frozenset({
    "psycopg", "psycopg_pool", "uvicorn", "starlette", "sse_starlette", "opentelemetry", "httpx", "anthropic",
    "openai", "aiobotocore", "botocore", "google", "mcp", "pyinstrument", "fastapi",
})
"""Packages only a command that uses them may import (serve, a PostgreSQL store, an exporter, a provider)."""

FLOW = '''
import tether


@tether.workflow
async def hello(ctx: tether.Ctx) -> str:
    return "hi"
'''


def _modules(cwd: Path, *argv: str) -> set[str]:
    """Every module a real `tether ARGV` process imported (from `python -X importtime`)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tether.cli.main", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def _imported(cwd: Path, *argv: str) -> set[str]:
    """Top-level packages a real `tether ARGV` process imported."""
    return {name.split(".")[0] for name in _modules(cwd, *argv)}


def test_version_and_help_import_no_part_of_the_engine(tmp_path: Path) -> None:
    for argv in (["--version"], ["--help"]):
        loaded = _modules(tmp_path, *argv)
        assert "tether.cli.main" in loaded and loaded.isdisjoint({n for n in NOT_AT_STARTUP})
        heavy = sorted(n for n in loaded if n.startswith(("tether.engine.", "tether.journal", "tether.agents",
                                                          "tether.models", "tether.budget", "tether.observability"))
                       and n != "tether.engine.targets")
        assert heavy == [], (argv, heavy)


def test_the_cli_starts_without_the_server_otel_database_or_provider_sdks(tmp_path: Path) -> None:
    for argv in (["--version"], ["--help"], ["run", "--help"], ["worker", "--help"], ["serve", "--help"]):
        loaded = _imported(tmp_path, *argv)
        assert {"tether", "typer"} <= loaded
        assert loaded.isdisjoint(NOT_AT_STARTUP), (argv, sorted(loaded & NOT_AT_STARTUP))


def test_running_and_reading_on_sqlite_import_no_postgres_driver_server_or_sdk(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    store = f"sqlite:///{tmp_path}/t.db"
    ran = _imported(tmp_path, "run", "flows:hello", "--run-id", "r1", "--store", store, "--json")
    listed = _imported(tmp_path, "runs", "--store", store, "--json")
    assert ran.isdisjoint(NOT_AT_STARTUP), sorted(ran & NOT_AT_STARTUP)
    assert listed.isdisjoint(NOT_AT_STARTUP), sorted(listed & NOT_AT_STARTUP)
