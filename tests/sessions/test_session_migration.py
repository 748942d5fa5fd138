"""Stores written before sessions existed gain their tables when opened (SQLite version 1, PostgreSQL 4)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.contracts.sessions import Note, SessionRecord
from tether.stores.postgres import PostgresStore
from tether.stores.postgres_sql import SCHEMA_VERSION as PG_SCHEMA_VERSION
from tether.stores.sqlite import SCHEMA_VERSION, SqliteStore


async def test_a_version_1_sqlite_file_gains_the_session_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    await store.close()
    with sqlite3.connect(path) as c:  # what a version-1 file holds: no session tables
        for table in ("sessions", "turns", "notes"):
            c.execute(f"DROP TABLE {table}")
        c.execute("PRAGMA user_version = 1")
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT name FROM sqlite_master WHERE name = 'sessions'").fetchone() is None
    store = SqliteStore(path)
    assert (await store.session_create(SessionRecord("s", created_at=1.0))).session_id == "s"
    await store.note_put(Note("w", "k", "v"))
    assert [n.key for n in await store.note_list("w")] == ["k"]
    await store.close()
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (2,)


async def test_a_version_4_postgres_schema_is_upgraded_in_place(pg_dsn: str, pg_schema: str) -> None:
    import psycopg

    store = PostgresStore(pg_dsn, schema=pg_schema)
    await store.session_get("warm-up")  # creates the schema at the current version
    await store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in ("sessions", "turns", "notes"):
            conn.execute(f'DROP TABLE "{pg_schema}".{table}')
        conn.execute(f'UPDATE "{pg_schema}".version SET v = 4')
    store = PostgresStore(pg_dsn, schema=pg_schema)
    assert (await store.session_create(SessionRecord("s", created_at=1.0))).session_id == "s"
    assert await store.session_list() == [SessionRecord("s", created_at=1.0)]
    await store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute(f'SELECT v FROM "{pg_schema}".version').fetchone() == (PG_SCHEMA_VERSION,)
