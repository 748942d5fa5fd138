"""`SqliteStore`: the embedded default store (stdlib sqlite3, WAL, writes in `BEGIN IMMEDIATE`).

Calls block inline: a local SQLite write takes microseconds, far less than a thread hop would. The
WAL's checkpoints (an fsync each) run on a thread of their own instead (`wal_checkpoint`).
"""

from __future__ import annotations

import json
import operator
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.errors import JournalCorruptError, JournalOrderViolation, StoreUnavailableError
from tether.contracts.retention import CompactResult, RunRewrite, RunSize, StoreStats
from tether.journal.blobs import blob_prefix
from tether.stores.codec import check_rows, decode_batch, decode_meta, decode_rows, effect_json, number_entries
from tether.stores.leases import (
    check_acquire,
    check_fence,
    new_lease,
    releases,
    renewed,
)
from tether.stores.run_ids import check_run_id
from tether.stores.sqlite_sessions import SESSION_SCHEMA, SqliteSessions
from tether.stores.wal_checkpoint import SAFETY_NET_PAGES, WAL_KEPT_BYTES, WalCheckpointer

SCHEMA_VERSION = 2
"""2: sessions, turns and notes (`sqlite_sessions.SESSION_SCHEMA`)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    run_id TEXT PRIMARY KEY, created_at REAL NOT NULL, json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS meta_by_created ON meta (created_at DESC, run_id);
CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS effects_by_run ON effects (run_id, id);
CREATE TABLE IF NOT EXISTS leases (
    run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,
    expires_at REAL NOT NULL, ttl_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS epochs (run_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
""" + SESSION_SCHEMA


_HEAD_AND_LEASE = (
    "SELECT (SELECT MAX(seq) FROM entries WHERE run_id = ?), l.owner, l.epoch, l.expires_at"
    " FROM (SELECT ? AS run_id) AS q LEFT JOIN leases AS l ON l.run_id = q.run_id"
)
_FIRST = operator.itemgetter(0)
_INSERT = "INSERT INTO entries (run_id, seq, json) VALUES (?, ?, ?)"
_INSERT_NEXT = (
    "INSERT INTO entries (run_id, seq, json) SELECT ?1, ?2, ?3"
    " WHERE (SELECT MAX(seq) FROM entries WHERE run_id = ?1) = ?2 - 1"
    " AND (?4 IS NULL OR EXISTS (SELECT 1 FROM leases WHERE run_id = ?1 AND epoch = ?4 AND owner = ?5"
    " AND expires_at >= ?6))"
)
"""A row that lands only right after the run's head, and only under its current, unexpired lease."""


class _DriverErrors:
    """A reusable context manager (one per store: entering it costs less than a generator's) that raises
    sqlite3's errors as typed ones naming the file: an unusable file versus corrupt data."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.OperationalError):
            raise StoreUnavailableError(
                f"SQLite store {self.path} cannot be used right now ({exc}). Check that the file and "
                f"its directory are writable and that no other program holds a lock on it too long.",
                path=self.path,
            ) from None
        if isinstance(exc, sqlite3.DatabaseError):
            raise JournalCorruptError(
                f"SQLite store {self.path} is not a readable SQLite database ({exc}); it may be truncated "
                f"or overwritten. Nothing was changed: restore the file from a backup, or point the store "
                f"at another path.",
                path=self.path,
            ) from None


@dataclass(frozen=True, slots=True)
class _Settled:
    """What a checked append proved about one run, at one `PRAGMA data_version` of this connection: the
    head was this store's last row and the lease row was (epoch, owner) until `expires_at`.

    SQLite changes a connection's data_version whenever another connection commits to the file, so
    while it reads the same, neither the head nor the lease row can have moved, except by this
    connection (whose lease writes forget what was proved); only the clock can end the lease.
    """

    version: int
    epoch: int | None
    owner: str | None
    expires_at: float | None

    def holds(self, version: int, epoch: int | None, owner: str | None, now: float) -> bool:
        return (
            version == self.version
            and epoch == self.epoch
            and owner == self.owner
            and (self.expires_at is None or now <= self.expires_at)
        )


class SqliteStore(SqliteSessions):
    """A journal store in one SQLite file; safe for many processes on one host, with leases."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = str(path)
        self._clock = clock
        self._lock = threading.Lock()  # one connection; guard it should several threads share us
        self._owner_cache: tuple[LeaseOwner, str] | None = None
        self._heads: dict[str, int] = {}  # run_id -> the last seq this store wrote (a guess, checked in SQL)
        self._settled: dict[str, _Settled] = {}
        """run_id -> what the last checked append proved, while no other connection has written since."""
        self._errors = _DriverErrors(self.path)
        with self._driver():
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self._wal(busy_timeout_s)
            self._conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoints run on a thread of their own (see `WalCheckpointer`); this connection's own
            # automatic checkpoint stays as a safety net at a higher threshold.
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {SAFETY_NET_PAGES}")
            self._conn.execute(f"PRAGMA journal_size_limit = {WAL_KEPT_BYTES}")
        self._checkpointer = WalCheckpointer(self.path, writer_lock=self._lock)
        weakref.finalize(self, self._checkpointer.stop)
        with self._tx() as c:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _wal(self, patience_s: float) -> None:
        """Switch to WAL; a process creating the same new file at once can make this report busy
        without waiting on the busy timeout, so retry for a while."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _driver(self) -> _DriverErrors:
        """sqlite3's errors as typed ones that name the file: corrupt data versus an unusable file."""
        return self._errors

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._driver():
            yield self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock up front (no lock-upgrade deadlocks)."""
        with self._lock, self._driver():
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
        self._checkpointer.wrote()

    def _fenced(self, c: sqlite3.Connection, run_id: str, lease: Lease | None) -> None:
        if lease is None:
            return
        row = c.execute("SELECT owner, epoch, expires_at FROM leases WHERE run_id = ?", (run_id,)).fetchone()
        if (
            row is not None
            and lease.run_id == run_id
            and row[1] == lease.epoch
            and row[0] == self._owner_json(lease.owner)
            and self._clock() <= row[2]
        ):
            return  # the current, unexpired lease (the common case, checked without parsing the row)
        check_fence(run_id, lease, self._held(c, run_id), self._clock())

    def _owner_json(self, owner: LeaseOwner) -> str:
        """The owner as its lease row stores it (cached: a segment appends with one owner)."""
        cached = self._owner_cache
        if cached is None or cached[0] is not owner:
            cached = self._owner_cache = (owner, owner.model_dump_json())
        return cached[1]

    def _held(self, c: sqlite3.Connection, run_id: str) -> Lease | None:
        row = c.execute(
            "SELECT owner, epoch, expires_at, ttl_s FROM leases WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return None
        owner = LeaseOwner.model_validate_json(row[0])
        return Lease(run_id=run_id, owner=owner, epoch=row[1], expires_at=row[2], ttl_s=row[3])

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        return self._insert(run_id, lease, lambda last: number_entries(run_id, last, (entry,)), None)[0]

    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        return self._insert(run_id, lease, lambda last: number_entries(run_id, last, entries), None)

    async def append_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]:
        """Append rows already encoded by `codec.encode_entry` (the segment's group commits)."""
        return self.append_rows_now(run_id, rows, lease)

    def append_rows_now(self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None) -> list[int]:
        """`append_rows` in the calling thread: it never waits, so a segment may commit without a task."""

        def checked(last: int) -> list[tuple[int, str]]:
            check_rows(run_id, last, rows)
            return rows

        return self._insert(run_id, lease, checked, rows)

    def _insert(
        self,
        run_id: str,
        lease: Lease | None,
        numbered: Callable[[int], list[tuple[int, str]]],
        claimed: list[tuple[int, str]] | None,
    ) -> list[int]:
        """One transaction. The common case is one conditional INSERT per row: it lands only if the row
        continues the journal and the lease is current, both checked by SQLite inside the transaction.
        Anything else (another writer, a stale lease, a first append) takes the checked path, which
        reads the head and the lease and raises the precise error."""
        check_run_id(run_id)
        with self._lock, self._driver():
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                rows = self._speculate(c, run_id, lease, numbered, claimed)
                if rows is None:
                    c.execute("ROLLBACK")
                    c.execute("BEGIN IMMEDIATE")
                    rows = self._checked_insert(c, run_id, lease, numbered)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
        self._checkpointer.wrote(sum(len(text) for _, text in rows))
        if rows:
            self._heads[run_id] = rows[-1][0]
        return [seq for seq, _ in rows]

    def _speculate(
        self,
        c: sqlite3.Connection,
        run_id: str,
        lease: Lease | None,
        numbered: Callable[[int], list[tuple[int, str]]],
        claimed: list[tuple[int, str]] | None,
    ) -> list[tuple[int, str]] | None:
        """Insert after the head this store last wrote; None when that guess (or the lease) does not hold."""
        guess = self._heads.get(run_id)
        if guess is None or (lease is not None and lease.run_id != run_id):
            return None
        if claimed is not None:
            rows = claimed
        else:
            try:
                rows = numbered(guess)
            except JournalOrderViolation:
                return None  # perhaps only our guess is stale: the checked path decides
        if not rows or rows[0][0] != guess + 1 or (
            len(rows) > 1 and any(seq != guess + i for i, (seq, _) in enumerate(rows, 1))
        ):
            return None  # not the rows right after the head: the checked path says why
        epoch, owner, now = (None, None, 0.0) if lease is None else (
            lease.epoch, self._owner_json(lease.owner), self._clock()
        )
        # This transaction holds the write lock: nothing can move the head or the lease while it runs.
        version = c.execute("PRAGMA data_version").fetchone()[0]
        settled = self._settled.get(run_id)
        if settled is not None and settled.holds(version, epoch, owner, now):
            # No other connection has written since an append here proved the head and the lease, and
            # this one changed neither but by appending: the rows follow the head, under the lease.
            c.executemany(_INSERT, [(run_id, seq, text) for seq, text in rows])
            return rows
        # The first row is checked (it follows the head, under the lease); the rest follow it.
        if c.execute(_INSERT_NEXT, (run_id, *rows[0], epoch, owner, now)).rowcount != 1:
            return None
        if len(rows) > 1:
            c.executemany(_INSERT, [(run_id, seq, text) for seq, text in rows[1:]])
        expires_at = None if lease is None else c.execute(
            "SELECT expires_at FROM leases WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
        self._settled[run_id] = _Settled(version, epoch, owner, expires_at)
        return rows

    def _checked_insert(
        self, c: sqlite3.Connection, run_id: str, lease: Lease | None,
        numbered: Callable[[int], list[tuple[int, str]]],
    ) -> list[tuple[int, str]]:
        last, owner, epoch, expires_at = c.execute(_HEAD_AND_LEASE, (run_id, run_id)).fetchone()
        if lease is not None and not (
            owner is not None
            and lease.run_id == run_id
            and epoch == lease.epoch
            and owner == self._owner_json(lease.owner)
            and self._clock() <= expires_at
        ):
            check_fence(run_id, lease, self._held(c, run_id), self._clock())  # raises why
        rows = numbered(last or 0)
        if len(rows) == 1:
            c.execute(_INSERT, (run_id, *rows[0]))
        elif rows:
            c.executemany(_INSERT, [(run_id, seq, text) for seq, text in rows])
        return rows

    async def load(self, run_id: str) -> list[JournalEntry]:
        with self._read() as c:
            # As bytes: the checksum is over the stored bytes, so nothing is decoded and re-encoded. The texts alone
            # (no seq column, a tuple member fewer per row): the entries carry their seqs, and a journal whose seqs
            # run 1..n, in rows numbered 1..n (its first and last seq, read from the key), is in order and whole.
            # Read off the cursor (no `fetchall`): one list of the texts, not a list of rows and then the texts.
            texts = list(map(_FIRST, c.execute(
                "SELECT CAST(json AS BLOB) FROM entries WHERE run_id = ? ORDER BY seq", (run_id,)
            )))
            first, last = c.execute("SELECT min(seq), max(seq) FROM entries WHERE run_id = ?", (run_id,)).fetchone()
        fast = decode_batch(texts) if texts else []
        if fast is not None and (not fast or (first == 1 and last == len(fast))):
            return fast
        with self._read() as c:  # the checked path reads the row numbers too: it names what is wrong, and where
            rows = c.execute(
                "SELECT seq, CAST(json AS BLOB) FROM entries WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
        return decode_rows(run_id, rows, str(self.path))

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        check_run_id(meta.run_id)
        with self._tx() as c:
            self._fenced(c, meta.run_id, lease)
            c.execute(
                "INSERT INTO meta (run_id, created_at, json) VALUES (?, ?, ?) ON CONFLICT (run_id)"
                " DO UPDATE SET created_at = excluded.created_at, json = excluded.json",
                (meta.run_id, meta.created_at, meta.model_dump_json()),
            )

    async def get_meta(self, run_id: str) -> RunMeta | None:
        with self._read() as c:
            row = c.execute("SELECT json FROM meta WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else decode_meta(row[0])

    async def list_runs(self, *, limit: int = 100) -> list[RunMeta]:
        with self._read() as c:
            rows = c.execute("SELECT json FROM meta ORDER BY created_at DESC, run_id LIMIT ?", (limit,)).fetchall()
        return [decode_meta(r[0]) for r in rows]

    async def delete(self, run_id: str) -> None:
        self._heads.pop(run_id, None)
        self._settled.pop(run_id, None)
        with self._tx() as c:
            for table in ("entries", "meta", "effects", "leases"):
                c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    async def delete_runs(self, run_ids: Sequence[str], *, keep_blobs: Collection[str] = ()) -> dict[str, int]:
        """`RetentionStore.delete_runs`: every row of `run_ids` in one transaction (their epochs stay)."""
        ids, keep = list(dict.fromkeys(run_ids)), set(keep_blobs)
        counts = dict.fromkeys(("entries", "meta", "effects", "leases", "blobs"), 0)
        for run_id in ids:
            self._heads.pop(run_id, None)
            self._settled.pop(run_id, None)
        with self._tx() as c:
            for run_id in ids:
                for table in ("entries", "meta", "effects", "leases"):
                    counts[table] += c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,)).rowcount
                low = blob_prefix(run_id)
                high = low[:-1] + chr(ord("/") + 1)  # keys are compared bytewise: [run/, run0) is the prefix
                keys = [k for (k,) in c.execute("SELECT key FROM blobs WHERE key >= ? AND key < ?", (low, high))
                        if k not in keep]
                c.executemany("DELETE FROM blobs WHERE key = ?", [(k,) for k in keys])
                counts["blobs"] += len(keys)
        return counts

    async def rewrite_run(self, rewrite: RunRewrite) -> None:
        """`RewritingStore.rewrite_run` in one transaction with secure_delete on (the bytes an update frees are
        zeroed), then the WAL checkpointed and truncated, so no page of the file holds the old payloads."""
        run_id = rewrite.run_id
        self._heads.pop(run_id, None)
        self._settled.pop(run_id, None)
        with self._lock, self._driver():
            self._conn.execute("PRAGMA secure_delete = ON")
        try:
            with self._tx() as c:
                last = c.execute("SELECT MAX(seq) FROM entries WHERE run_id = ?", (run_id,)).fetchone()[0] or 0
                check_rows(run_id, last, rewrite.append)
                c.executemany("UPDATE entries SET json = ? WHERE run_id = ? AND seq = ?",
                              [(text, run_id, seq) for seq, text in rewrite.entries.items()])
                c.executemany(_INSERT, [(run_id, seq, text) for seq, text in rewrite.append])
                c.executemany("UPDATE blobs SET data = ? WHERE key = ?", [(d, k) for k, d in rewrite.blobs.items()])
                if rewrite.meta_json is not None:
                    c.execute("UPDATE meta SET json = ? WHERE run_id = ?", (rewrite.meta_json, run_id))
                if rewrite.effects is not None:
                    c.execute("DELETE FROM effects WHERE run_id = ?", (run_id,))
                    c.executemany("INSERT INTO effects (run_id, json) VALUES (?, ?)",
                                  [(run_id, effect_json(run_id, row)) for row in rewrite.effects])
        finally:
            with self._lock, self._driver():
                self._conn.execute("PRAGMA secure_delete = OFF")
        with self._read() as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _disk(self, c: sqlite3.Connection) -> tuple[int, int]:
        """(bytes the database file takes, bytes of its free pages)."""
        size = c.execute("PRAGMA page_size").fetchone()[0]
        pages, free = c.execute("PRAGMA page_count").fetchone()[0], c.execute("PRAGMA freelist_count").fetchone()[0]
        return pages * size, free * size

    async def store_stats(self, *, largest: int = 5) -> StoreStats:
        with self._read() as c:
            runs = c.execute(
                "SELECT count(*) FROM (SELECT run_id FROM meta UNION SELECT run_id FROM entries)").fetchone()
            entries, entry_bytes = c.execute(
                "SELECT count(*), coalesce(sum(length(CAST(json AS BLOB))), 0) FROM entries").fetchone()
            effects, effect_bytes = c.execute(
                "SELECT count(*), coalesce(sum(length(CAST(json AS BLOB))), 0) FROM effects").fetchone()
            meta_bytes = c.execute("SELECT coalesce(sum(length(CAST(json AS BLOB))), 0) FROM meta").fetchone()[0]
            blobs, blob_bytes = c.execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs").fetchone()
            top = c.execute(
                "SELECT run_id, sum(n), sum(b) FROM (SELECT run_id, 1 AS n, length(CAST(json AS BLOB)) AS b"
                " FROM entries"
                " UNION ALL SELECT run_id, 0, length(CAST(json AS BLOB)) FROM effects"
                " UNION ALL SELECT run_id, 0, length(CAST(json AS BLOB)) FROM meta)"
                " GROUP BY run_id ORDER BY 3 DESC, 1 LIMIT ?", (largest,)).fetchall()
            disk, free = self._disk(c)
        return StoreStats(
            store="sqlite", runs=runs[0], entries=entries, bytes=entry_bytes + effect_bytes + meta_bytes + blob_bytes,
            blobs=blobs, blob_bytes=blob_bytes, effects=effects,
            largest=[RunSize(run_id=r, entries=n, bytes=b) for r, n, b in top],
            on_disk_bytes=disk, reclaimable_bytes=free,
        )

    async def compact(self) -> CompactResult:
        """VACUUM (rewrites the file without its free pages), then truncate the WAL."""
        with self._read() as c:
            before = self._disk(c)[0]
            c.execute("VACUUM")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            after = self._disk(c)[0]
        return CompactResult(store="sqlite", action="VACUUM", before_bytes=before, after_bytes=after)

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        with self._tx() as c:
            if lease is not None:
                self._fenced(c, lease.run_id, lease)
            c.execute("INSERT OR REPLACE INTO blobs (key, data) VALUES (?, ?)", (key, bytes(data)))
        self._checkpointer.wrote(len(data))

    async def get_blob(self, key: str) -> bytes | None:
        with self._read() as c:
            row = c.execute("SELECT data FROM blobs WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        check_run_id(run_id)
        text = effect_json(run_id, row)
        with self._tx() as c:
            c.execute("INSERT INTO effects (run_id, json) VALUES (?, ?)", (run_id, text))

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        with self._read() as c:
            rows = c.execute("SELECT json FROM effects WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    async def acquire(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> Lease:
        check_run_id(run_id)
        self._settled.pop(run_id, None)
        with self._tx() as c:
            now = self._clock()
            check_acquire(run_id, self._held(c, run_id), owner, ttl_s, now)
            row = c.execute("SELECT epoch FROM epochs WHERE run_id = ?", (run_id,)).fetchone()
            lease = new_lease(run_id, owner, 0 if row is None else row[0], ttl_s, now)
            c.execute(
                "INSERT OR REPLACE INTO epochs (run_id, epoch) VALUES (?, ?)", (run_id, lease.epoch)
            )
            self._put_lease(c, lease)
        return lease

    def _put_lease(self, c: sqlite3.Connection, lease: Lease) -> None:
        c.execute(
            "INSERT OR REPLACE INTO leases (run_id, owner, epoch, expires_at, ttl_s)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                lease.run_id,
                lease.owner.model_dump_json(),
                lease.epoch,
                lease.expires_at,
                lease.ttl_s,
            ),
        )

    async def renew(self, lease: Lease) -> Lease:
        self._settled.pop(lease.run_id, None)
        with self._tx() as c:
            fresh = renewed(lease, self._held(c, lease.run_id), self._clock())
            self._put_lease(c, fresh)
        return fresh

    async def release(self, lease: Lease) -> None:
        self._settled.pop(lease.run_id, None)
        with self._tx() as c:
            if releases(lease, self._held(c, lease.run_id)):
                c.execute("DELETE FROM leases WHERE run_id = ?", (lease.run_id,))

    async def close(self) -> None:
        self._checkpointer.stop()  # first: the last connection to close checkpoints and removes the WAL
        with self._lock:
            self._conn.close()
