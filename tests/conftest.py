"""Shared fixtures for tether's own tests: the real PostgreSQL server and a fresh schema per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_DSN = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The test server's DSN; unreachable, it skips locally and fails under CI (which starts PostgreSQL)."""
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL not reachable at {PG_DSN}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {PG_DSN}: {exc}")
    return PG_DSN


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema name no other test uses, dropped afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
