"""`WalCheckpointer`: a SQLite store's WAL checkpoints on a thread of their own, off the writer's path.

A checkpoint copies the write-ahead log back into the database file and fsyncs it: tens of
milliseconds on a real disk. SQLite's automatic checkpoint runs inside the COMMIT that crosses its
threshold, so the append that happens to cross it (and, on an event loop, every task of the process)
waits for the fsync. The store raises the automatic threshold to a safety net and this thread runs
a PASSIVE checkpoint (it never waits on, nor blocks, readers and writers) each time about twice as
much has been written as the default threshold allows (`CHECKPOINT_PAGES`). Durability does not
change: a commit is durable against a crash of the process once it is in the WAL, whoever copies it
back later.

The WAL starts over (its next frame goes to the start of the file) only when a writer begins while
every frame is copied back. A writer that never pauses appends during every checkpoint, so the thread
ends each round by copying the last few frames while it holds the store's own write lock: then no
writer of this store is in between, and its next transaction starts the WAL over.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from contextlib import AbstractContextManager, nullcontext
from urllib.parse import quote

PAGE_BYTES = 4096
CHECKPOINT_PAGES = 2000
"""Checkpoint after about this many WAL frames were written (8 MB; twice SQLite's default automatic
threshold). Each round has a fixed cost for the writer (the WAL header's fsync when the log starts
over, a moment under its lock, the thread's turns at the GIL), and a journal's appends rewrite the
same right-hand pages many times in one round; measured over 4,000 one-turn agents, rounds of 2,000
frames cost the writer about 3% less per agent than rounds of 1,000, and 4,000 no less than 2,000."""
SAFETY_NET_PAGES = 4 * CHECKPOINT_PAGES
"""The writer's own automatic checkpoint threshold: reached only if this thread falls behind (writes
that never pause) or is gone, so the WAL stays bounded whatever happens here."""
WAL_KEPT_BYTES = 2 * CHECKPOINT_PAGES * PAGE_BYTES
"""What the WAL file is cut back to when it starts over (`journal_size_limit`): a burst that grew it to
the safety net does not leave 32 MB on disk."""
_CATCH_UP_ROUNDS = 4
"""Checkpoints in a row while writes keep landing, before the last one under the writer's lock."""
_FIRST_FRAMES_PER_PAGE = 4.0
"""The guess before the first round measures it: what small journal rows cost (3.6 frames a commit)."""
_MAX_FRAMES_PER_PAGE = 8.0
"""The most WAL frames one counted page is taken to cost (a b-tree split rewrites siblings and parent)."""


class WalCheckpointer:
    """Runs one database file's checkpoints on a daemon thread, started on the first one needed.

    It holds the path and the writer's lock, never the store, so a store dropped without `close()` can
    still be collected (its finalizer stops the thread). `checkpoints` counts the checkpoints this
    thread completed.

    The writer counts pages from what it writes (`wrote`); a transaction writes more WAL frames than
    that (the leaf, split siblings, their parent, page 1 when the file grows), so after each round the
    thread compares the frames the WAL holds with the pages counted and scales the count to match: the
    next round comes after about `every_pages` frames, whatever the rows look like.
    """

    def __init__(
        self,
        path: str,
        *,
        every_pages: int = CHECKPOINT_PAGES,
        writer_lock: AbstractContextManager[object] | None = None,
    ) -> None:
        self.path = path
        self.every_pages = every_pages
        self.checkpoints = 0
        self.frames_per_page = _FIRST_FRAMES_PER_PAGE
        """WAL frames one counted page costs, as the last round measured it."""
        self._pages = 0.0
        self._writer_lock: AbstractContextManager[object] = (
            nullcontext() if writer_lock is None else writer_lock
        )
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0

    def wrote(self, nbytes: int = 0) -> None:
        """Count one committed write transaction of about `nbytes` (a page at least); wake the thread
        once enough pages have gone into the WAL since its last checkpoint."""
        self._pages += (1 + nbytes // PAGE_BYTES) * self.frames_per_page
        if self._pages >= self.every_pages:
            self._pages = 0.0
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
                    self._round(conn)
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

    def _round(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL back while the writer goes on, then its last frames under the writer's lock."""
        first_logged: int | None = None
        for _ in range(_CATCH_UP_ROUNDS):
            logged, copied = self._checkpoint(conn)
            if first_logged is None:
                first_logged = logged
            if copied < logged and not self._stopping:
                continue  # a reader's snapshot or a concurrent checkpoint held some back: once more
            break
        self._sync_files()
        with self._writer_lock:  # frames the writer added meanwhile: a few, copied in a millisecond
            self._checkpoint(conn)
        counted = self.every_pages / self.frames_per_page  # pages the writer counted since the last round
        if first_logged:
            self.frames_per_page = min(max(first_logged / counted, 1.0), _MAX_FRAMES_PER_PAGE)

    def _sync_files(self) -> None:
        """Flush the pages the bulk copied (and the WAL frames so far) before taking the writer's lock, so
        the syncs the last checkpoint makes under it find little to write. Only adds durability."""
        for name in (self.path, f"{self.path}-wal"):
            try:
                fd = os.open(name, os.O_RDONLY)
            except OSError:
                continue  # no WAL (yet, or any more): nothing to flush
            try:
                _fdatasync(fd)
            finally:
                os.close(fd)

    def _checkpoint(self, conn: sqlite3.Connection) -> tuple[int, int]:
        _busy, logged, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        return int(logged), int(copied)

    def stop(self) -> None:
        """Stop the thread (after the checkpoint it may be running) and close its connection."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread is not threading.current_thread():
            thread.join(timeout=30.0)


_fdatasync = getattr(os, "fdatasync", os.fsync)  # no fdatasync on macOS


def _contended(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text
