"""Fixtures for the worker tests: a store URL on this test's own PostgreSQL schema, the request log, a client engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tether


@pytest.fixture
def store_url(pg_dsn: str, pg_schema: str) -> str:
    """A store URL naming this test's own schema."""
    return f"{pg_dsn}?schema={pg_schema}"


@pytest.fixture
def request_log(tmp_path: Path) -> Path:
    return tmp_path / "requests.log"


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[tether.Engine]:
    """The test's own engine on the shared store: it enqueues, waits and reads; it drives nothing."""
    import worker_app

    engine = tether.Engine(store=store_url, workflows=[worker_app.chain, worker_app.stamp, worker_app.approval])
    yield engine
    await engine.close()
