"""The SQLite store's WAL checkpoints run on a thread of their own, not inside an append's COMMIT."""

from __future__ import annotations

import gc
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.contracts.entries import JournalEntry
from tether.stores.sqlite import SqliteStore
from tether.stores.wal_checkpoint import SAFETY_NET_PAGES, WAL_KEPT_BYTES, WalCheckpointer


def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _rows_in_the_database_file(path: Path) -> int:
    """Journal rows the main database file holds on its own (`immutable` reads it without the WAL)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
    except sqlite3.DatabaseError:  # not even the schema copied back yet, or caught mid-copy: look again
        return 0
    finally:
        conn.close()


def _wal_exists(path: Path) -> bool:
    return Path(f"{path}-wal").exists()


async def _append(store: SqliteStore, run_id: str, n: int) -> None:
    for i in range(n):
        await store.append(run_id, JournalEntry(kind="step", key=f"k{i}", value={"i": i, "pad": "x" * 200}))


async def test_the_thread_copies_the_wal_back_while_the_writer_never_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    try:
        (threshold,) = store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()
        assert threshold == SAFETY_NET_PAGES  # the writer's own checkpoint is only a safety net
        (kept,) = store._conn.execute("PRAGMA journal_size_limit").fetchone()
        assert kept == WAL_KEPT_BYTES  # and a WAL that grew to it is cut back when it starts over
        store._checkpointer.every_pages = 50
        await _append(store, "r", 120)  # far below the safety net and SQLite's default of 1,000 pages
        # Only the checkpoint thread can have put these rows into the database file itself.
        assert _eventually(lambda: _rows_in_the_database_file(path) > 0)
        assert store._checkpointer.checkpoints >= 1
        thread = store._checkpointer._thread
        assert thread is not None and thread.name == "tether-wal-checkpoint" and thread.daemon
        assert len(await store.load("r")) == 120
    finally:
        await store.close()


async def test_close_stops_the_thread_and_the_last_connection_removes_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    store._checkpointer.every_pages = 10
    await _append(store, "r", 30)
    assert _eventually(lambda: store._checkpointer.checkpoints >= 1)
    thread = store._checkpointer._thread
    await store.close()
    assert thread is not None and not thread.is_alive()
    assert not _wal_exists(path)
    reopened = SqliteStore(path)
    try:
        assert len(await reopened.load("r")) == 30
    finally:
        await reopened.close()


async def test_a_store_dropped_without_close_stops_its_thread(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    store._checkpointer.every_pages = 10
    await _append(store, "r", 30)
    checkpointer = store._checkpointer
    assert _eventually(lambda: checkpointer.checkpoints >= 1)
    thread = checkpointer._thread
    del store
    gc.collect()
    assert thread is not None and _eventually(lambda: not thread.is_alive())


def test_a_file_removed_meanwhile_is_not_created_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gone = tmp_path / "gone.db"
    checkpointer = WalCheckpointer(str(gone), every_pages=1)
    with caplog.at_level(logging.WARNING, logger="tether"):
        checkpointer.wrote()
        assert _eventually(lambda: "background WAL checkpoint failed" in caplog.text)
    checkpointer.stop()
    assert not gone.exists()
    assert checkpointer.checkpoints == 0


def test_pages_are_counted_per_transaction_and_by_size() -> None:
    checkpointer = WalCheckpointer("unused.db", every_pages=10**9)
    checkpointer.wrote()
    checkpointer.wrote(3 * 4096 + 1)
    assert checkpointer._pages == 1 + 4
    assert checkpointer._thread is None  # nothing started before a checkpoint is due
