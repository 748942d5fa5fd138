"""The SQLite store's WAL checkpoints run on a thread of their own, not inside an append's COMMIT."""

from __future__ import annotations

import gc
import logging
import sqlite3
import threading
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


def _wal_bytes(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


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


def test_pages_are_counted_per_transaction_and_by_size_in_wal_frames() -> None:
    checkpointer = WalCheckpointer("unused.db", every_pages=10**9)
    checkpointer.frames_per_page = 2.5
    checkpointer.wrote()
    checkpointer.wrote(3 * 4096 + 1)
    assert checkpointer._pages == (1 + 4) * 2.5
    assert checkpointer._thread is None  # nothing started before a checkpoint is due


class _Wal:
    """A connection whose PASSIVE checkpoint reports `logged` frames, all copied, and notes whether
    the writer's lock was held while it ran."""

    def __init__(self, logged: int, lock: threading.Lock) -> None:
        self.logged = logged
        self.lock = lock
        self.under_lock: list[bool] = []

    def execute(self, sql: str) -> _Wal:
        assert sql == "PRAGMA wal_checkpoint(PASSIVE)"
        self.under_lock.append(self.lock.locked())
        return self

    def fetchone(self) -> tuple[int, int, int]:
        return 0, self.logged, self.logged


@pytest.mark.parametrize(("logged", "expected"), [(900, 3.6), (50, 1.0), (10**6, 8.0)])
def test_a_round_ends_under_the_writers_lock_and_scales_the_count_to_the_frames(
    logged: int, expected: float
) -> None:
    lock = threading.Lock()
    checkpointer = WalCheckpointer("unused.db", every_pages=1000, writer_lock=lock)
    assert checkpointer.frames_per_page == 4.0  # the guess: 250 counted pages make 1,000 frames
    wal = _Wal(logged, lock)
    checkpointer._round(wal)  # type: ignore[arg-type]
    assert wal.under_lock == [False, True]  # the bulk while the writer goes on, the rest under its lock
    assert checkpointer.frames_per_page == pytest.approx(expected)  # clamped to [1, 8]
    assert checkpointer.checkpoints == 2 and not lock.locked()


async def test_a_writer_that_never_pauses_has_its_wal_started_over_by_the_thread(tmp_path: Path) -> None:
    """Appends back to back: each round of the thread ends with the WAL all copied and no writer in
    between, so the writer's next transaction starts it over. Without that the WAL grows to the
    writer's safety net (`SAFETY_NET_PAGES`, 32 MB), whose checkpoint then runs inside an append and
    cuts the file back to `WAL_KEPT_BYTES`."""
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    try:
        store._checkpointer.every_pages = 100
        await _append(store, "r", 4000)  # well over the safety net's 8,000 WAL frames in all
        assert store._checkpointer.checkpoints >= 4
        assert _wal_bytes(path) < WAL_KEPT_BYTES
        assert 1.0 <= store._checkpointer.frames_per_page <= 8.0
        assert len(await store.load("r")) == 4000
    finally:
        await store.close()
