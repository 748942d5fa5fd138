"""A new `tether worker` reaches its first claim without importing what it does not use (startup cost).

The timings themselves are measured, not asserted (a shared machine); what is asserted is what the
worker process loaded: the PostgreSQL driver it needs, and no server, exporter or provider SDK.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.timeout(180)

APP = '''
import os
import sys

import tether


@tether.workflow(name="loaded")
async def loaded(ctx: tether.Ctx) -> list[str]:
    """The top-level packages this worker process has imported by the time it drives a run."""
    return sorted({name.split(".")[0] for name in list(sys.modules)})


engine = tether.Engine(store=os.environ["STARTUP_STORE"], workflows=[loaded])
'''

NOT_IN_A_WORKER = {"uvicorn", "starlette", "sse_starlette", "opentelemetry", "httpx", "anthropic", "openai",
                   "aiobotocore", "botocore", "mcp", "pyinstrument"}


def _tether(*argv: str) -> list[str]:
    return [sys.executable, "-m", "tether.cli.main", *argv]


async def _wait(store_url: str, run_id: str) -> tether.RunOutcome:
    client = tether.Engine(store=store_url)
    try:
        return await client.wait(run_id, timeout=90)
    finally:
        await client.close()


def test_a_new_worker_claims_having_loaded_only_the_database_driver_it_needs(tmp_path: Path, store_url: str) -> None:
    (tmp_path / "startup_app.py").write_text(APP)
    env = {**os.environ, "STARTUP_STORE": store_url}
    env.pop("TETHER_STORE", None)
    queued = subprocess.run(_tether("run", "startup_app:loaded", "--queue", "--run-id", "first", "--json"),
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert queued.returncode == 0, queued.stderr
    worker = subprocess.Popen(_tether("worker", "--app", "startup_app:engine", "--poll", "0.1"), cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        outcome = asyncio.run(_wait(store_url, "first"))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert outcome.status == "ok", outcome.error
    loaded = set(outcome.value)
    assert {"tether", "psycopg", "psycopg_pool"} <= loaded
    assert loaded.isdisjoint(NOT_IN_A_WORKER), sorted(loaded & NOT_IN_A_WORKER)
