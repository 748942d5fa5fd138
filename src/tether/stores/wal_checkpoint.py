"""`WalCheckpointer`: a SQLite store's WAL checkpoints on a thread of their own, off the writer's path.

A checkpoint copies the write-ahead log back into the database file and fsyncs it: tens of
milliseconds on a real disk. SQLite's automatic checkpoint runs inside the COMMIT that crosses its
threshold, so the append that happens to cross it (and, on an event loop, every task of the process)
waits for the fsync. The store raises the automatic threshold to a safety net and this thread runs
a PASSIVE checkpoint (it never waits on, nor blocks, readers and writers) each time about as much
has been written as the default threshold allows. Durability does not change: a commit is durable
against a crash of the process once it is in the WAL, whoever copies it back later.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from urllib.parse import quote

PAGE_BYTES = 4096
CHECKPOINT_PAGES = 1000
"""Checkpoint after about this many pages were written (SQLite's default automatic threshold)."""
SAFETY_NET_PAGES = 4 * CHECKPOINT_PAGES
"""The writer's own automatic checkpoint threshold: reached only if this thread falls behind (writes
that never pause) or is gone, so the WAL stays bounded whatever happens here."""
WAL_KEPT_BYTES = 2 * CHECKPOINT_PAGES * PAGE_BYTES
"""What the WAL file is cut back to when it starts over (`journal_size_limit`): a burst that grew it to
the safety net does not leave 16 MB on disk."""
_CATCH_UP_ROUNDS = 4
"""Checkpoints in a row while writes keep landing: the WAL starts over only once all of it is copied
back, and the frames written during one checkpoint are a small one's work."""


class WalCheckpointer:
    """Runs one database file's checkpoints on a daemon thread, started on the first one needed.

    It holds the path, never the store, so a store dropped without `close()` can still be collected
    (its finalizer stops the thread). `checkpoints` counts the checkpoints this thread completed.
    """

    def __init__(self, path: str, *, every_pages: int = CHECKPOINT_PAGES) -> None:
        self.path = path
        self.every_pages = every_pages
        self.checkpoints = 0
        self._pages = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0

    def wrote(self, nbytes: int = 0) -> None:
        """Count one committed write transaction of about `nbytes` (a page at least); wake the thread
        once enough pages have gone into the WAL since its last checkpoint."""
        self._pages += 1 + nbytes // PAGE_BYTES
        if self._pages >= self.every_pages:
            self._pages = 0
            self._wake_thread()

    def _wake_thread(self) -> None:
        if self._stopping:
            return
        thread = self._thread
        if thread is None or self._pid != os.getpid() or not thread.is_alive():
            # First use, or a forked child (threads do not survive a fork): a thread of its own.
            self._pid = os.getpid()
            self._wake = threading.Event()
            thread = self._thread = threading.Thread(
                target=self._run, args=(self._wake,), name="tether-wal-checkpoint", daemon=True
            )
            thread.start()
        self._wake.set()

    def _run(self, wake: threading.Event) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                wake.wait()
                wake.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:  # read-write, never create: a file removed meanwhile stays removed
                        conn = sqlite3.connect(f"file:{quote(self.path)}?mode=rw", uri=True, isolation_level=None)
                    for _ in range(_CATCH_UP_ROUNDS):
                        _busy, logged, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        self.checkpoints += 1
                        if copied >= logged or self._stopping:
                            break  # all of it copied: the next write starts the WAL over
                except sqlite3.Error as exc:  # the writer's safety net still bounds the WAL
                    if _contended(exc):
                        continue  # another connection is checkpointing this file right now
                    logging.getLogger("tether").warning(
                        "SQLite store %s: background WAL checkpoint failed (%s); the writer's own "
                        "automatic checkpoint takes over.", self.path, exc,
                    )
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        """Stop the thread (after the checkpoint it may be running) and close its connection."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread is not threading.current_thread():
            thread.join(timeout=30.0)


def _contended(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text
