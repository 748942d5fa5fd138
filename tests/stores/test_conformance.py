"""Every shipped store passes the same conformance kit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.stores.jsonl import JsonlStore
from tether.stores.memory import MemoryStore
from tether.stores.postgres import PostgresStore
from tether.stores.sqlite import SqliteStore
from tether.testing.session_kit import SessionConformance
from tether.testing.store_kit import StoreConformance


class TestMemoryStore(StoreConformance, SessionConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[MemoryStore]:
        with pytest.warns(UserWarning, match="cannot be resumed"):
            s = MemoryStore()
        yield s
        await s.close()


class TestJsonlStore(StoreConformance, SessionConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[JsonlStore]:
        s = JsonlStore(tmp_path / "journals")
        yield s
        await s.close()


class TestSqliteStore(StoreConformance, SessionConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[SqliteStore]:
        s = SqliteStore(tmp_path / "tether.db")
        yield s
        await s.close()


class TestPostgresStore(StoreConformance, SessionConformance):
    @pytest.fixture
    async def store(self, pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
        s = PostgresStore(pg_dsn, schema=pg_schema)
        yield s
        await s.close()
