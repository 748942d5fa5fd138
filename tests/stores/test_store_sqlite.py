"""SQLite specifics: WAL, durability across instances, and two processes writing one run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from store_multiproc import assert_interleaved, run_writers

from tether.stores.leases import current_owner
from tether.stores.sqlite import SqliteStore
from tether.testing.store_kit import entry


async def test_database_is_in_wal_mode(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    await store.close()
    with sqlite3.connect(tmp_path / "t.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_new_instance_sees_the_journal_and_the_epoch(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    await store.append_many("r", [entry("a"), entry("b")])
    lease = await store.acquire("r", current_owner(), 30)
    await store.release(lease)
    await store.close()
    again = SqliteStore(tmp_path / "t.db")
    assert [e.key for e in await again.load("r")] == ["a", "b"]
    assert (await again.acquire("r", current_owner(), 30)).epoch == lease.epoch + 1
    await again.close()


async def test_two_processes_appending_get_one_total_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    run_writers(url, "shared", ["p", "q"], 200)
    run_writers(url, "batched", ["p", "q"], 200, batch=20)
    store = SqliteStore(tmp_path / "shared.db")
    await assert_interleaved(store, "shared", ["p", "q"], 200)
    await assert_interleaved(store, "batched", ["p", "q"], 200)
    await store.close()
