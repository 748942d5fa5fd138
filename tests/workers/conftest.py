"""Fixtures for the worker tests: the real PostgreSQL server (CI fails when it is down), a schema per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import tether

PG_DSN = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as exc:
        if os.environ.get("CI"):  # CI starts PostgreSQL: there, an unreachable server is a failure
            pytest.fail(f"PostgreSQL not reachable at {PG_DSN}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {PG_DSN}: {exc}")
    return PG_DSN


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    import psycopg

    name = f"w_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


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
