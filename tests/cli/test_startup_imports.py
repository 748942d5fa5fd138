"""What a `tether` command costs to start: it never imports the server, OpenTelemetry, a database driver or an SDK it does not use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOT_AT_STARTUP = frozenset({
    "psycopg", "psycopg_pool", "uvicorn", "starlette", "sse_starlette", "opentelemetry", "httpx", "anthropic",
    "openai", "aiobotocore", "botocore", "mcp", "pyinstrument",
})
"""Packages only a command that uses them may import (serve, a PostgreSQL store, an exporter, a provider)."""

FLOW = '''
import tether


@tether.workflow
async def hello(ctx: tether.Ctx) -> str:
    return "hi"
'''


def _imported(cwd: Path, *argv: str) -> set[str]:
    """Top-level packages a real `tether ARGV` process imported (from `python -X importtime`)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tether.cli.main", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.rsplit("|", 1)[-1] for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {row.strip().split(".")[0] for row in rows}


def test_the_cli_starts_without_the_server_otel_database_or_provider_sdks(tmp_path: Path) -> None:
    for argv in (["--help"], ["run", "--help"], ["worker", "--help"], ["serve", "--help"]):
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
