"""`PostgresStore`: journals in PostgreSQL (psycopg 3), shared by workers on any number of hosts.

psycopg is imported here only, when the store first connects, so `import tether` never needs it.
Appends and lease changes of one run serialize on `pg_advisory_xact_lock(hashtext(run_id))`.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.errors import ConfigError, StoreUnavailableError
from tether.stores.codec import decode_rows, effect_json, number_entries
from tether.stores.leases import (
    check_acquire,
    check_fence,
    new_lease,
    releases,
    renewed,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

_TABLES = """
CREATE TABLE IF NOT EXISTS {s}.entries (
    run_id text NOT NULL, seq bigint NOT NULL, json text NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS {s}.meta (
    run_id text PRIMARY KEY, created_at double precision NOT NULL, json text NOT NULL);
CREATE INDEX IF NOT EXISTS meta_by_created ON {s}.meta (created_at DESC, run_id);
CREATE TABLE IF NOT EXISTS {s}.blobs (key text PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.effects (
    id bigserial PRIMARY KEY, run_id text NOT NULL, json text NOT NULL);
CREATE INDEX IF NOT EXISTS effects_by_run ON {s}.effects (run_id, id);
CREATE TABLE IF NOT EXISTS {s}.leases (
    run_id text PRIMARY KEY, owner text NOT NULL, epoch bigint NOT NULL,
    expires_at double precision NOT NULL, ttl_s double precision NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.epochs (run_id text PRIMARY KEY, epoch bigint NOT NULL)
"""


def _redacted(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


class PostgresStore:
    """A journal store in one PostgreSQL schema (created on first use), with leases."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "tether",
        min_size: int = 1,
        max_size: int = 8,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(
                f"postgres schema {schema!r} is not a plain identifier; use letters, digits and "
                f"'_' (at most 63), starting with a letter or '_'."
            )
        self.dsn = dsn
        self.schema = schema
        self._sizes = (min_size, max_size)
        self._clock = clock
        self._pool: AsyncConnectionPool | None = None
        self._opening = asyncio.Lock()
        s = f'"{schema}"'
        self._sql = {
            "lock": "SELECT pg_advisory_xact_lock(hashtext(%s))",
            "head": f"SELECT (SELECT COALESCE(MAX(seq), 0) FROM {s}.entries WHERE run_id = %s),"
            f" l.owner, l.epoch, l.expires_at, l.ttl_s FROM (SELECT 1) AS one"
            f" LEFT JOIN {s}.leases AS l ON l.run_id = %s",
            "insert": f"INSERT INTO {s}.entries (run_id, seq, json)"
            f" SELECT %s, unnest(%s::bigint[]), unnest(%s::text[])",
            "load": f"SELECT seq, json FROM {s}.entries WHERE run_id = %s ORDER BY seq",
            "meta_put": f"INSERT INTO {s}.meta (run_id, created_at, json) VALUES (%s, %s, %s)"
            f" ON CONFLICT (run_id) DO UPDATE SET created_at = EXCLUDED.created_at,"
            f" json = EXCLUDED.json",
            "meta_get": f"SELECT json FROM {s}.meta WHERE run_id = %s",
            "meta_list": f"SELECT json FROM {s}.meta ORDER BY created_at DESC, run_id LIMIT %s",
            "blob_put": f"INSERT INTO {s}.blobs (key, data) VALUES (%s, %s)"
            f" ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
            "blob_get": f"SELECT data FROM {s}.blobs WHERE key = %s",
            "effect_put": f"INSERT INTO {s}.effects (run_id, json) VALUES (%s, %s)",
            "effect_load": f"SELECT json FROM {s}.effects WHERE run_id = %s ORDER BY id",
            "epoch_get": f"SELECT epoch FROM {s}.epochs WHERE run_id = %s",
            "epoch_put": f"INSERT INTO {s}.epochs (run_id, epoch) VALUES (%s, %s)"
            f" ON CONFLICT (run_id) DO UPDATE SET epoch = EXCLUDED.epoch",
            "lease_put": f"INSERT INTO {s}.leases (run_id, owner, epoch, expires_at, ttl_s)"
            f" VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET"
            f" owner = EXCLUDED.owner, epoch = EXCLUDED.epoch,"
            f" expires_at = EXCLUDED.expires_at, ttl_s = EXCLUDED.ttl_s",
            "lease_del": f"DELETE FROM {s}.leases WHERE run_id = %s",
        }
        self._deletes = [
            f"DELETE FROM {s}.{t} WHERE run_id = %s"
            for t in ("entries", "meta", "effects", "leases")
        ]

    async def _ready(self) -> AsyncConnectionPool:
        """Connect, create the schema (serialized across processes) and open the pool, once."""
        async with self._opening:
            if self._pool is None:
                import psycopg
                from psycopg_pool import AsyncConnectionPool

                try:
                    conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
                except psycopg.OperationalError as exc:
                    why = " ".join(str(exc).split()).rstrip(".?")
                    raise ConfigError(
                        f"cannot connect to the PostgreSQL store {_redacted(self.dsn)}: {why}. "
                        f"Check the store URL and that the server is up.",
                        dsn=_redacted(self.dsn),
                    ) from None
                async with conn, conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether:schema'))")
                    await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                    for statement in _TABLES.format(s=f'"{self.schema}"').split(";"):
                        await conn.execute(statement)
                pool = AsyncConnectionPool(
                    self.dsn,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    kwargs={"autocommit": True},
                    open=False,
                )
                await pool.open(wait=True)
                self._pool = pool
            return self._pool

    @asynccontextmanager
    async def _driver(self) -> AsyncIterator[None]:
        """psycopg's connection failures as a typed, retryable error naming the DSN without its password."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            yield
        except (psycopg.OperationalError, PoolTimeout) as exc:
            why = " ".join(str(exc).split()).rstrip(".?")
            raise StoreUnavailableError(
                f"PostgreSQL store {_redacted(self.dsn)} is unavailable ({why}); nothing was written. "
                f"Check that the server is up and reachable, then retry or resume the run.",
                dsn=_redacted(self.dsn),
            ) from None

    @asynccontextmanager
    async def _tx(self, run_id: str | None = None) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection in a transaction, holding `run_id`'s advisory lock if given."""
        pool = await self._ready()
        async with self._driver(), pool.connection() as conn, conn.transaction():
            if run_id is not None:
                await conn.execute(self._sql["lock"], (run_id,))
            yield conn

    async def _rows(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        pool = await self._ready()
        async with self._driver(), pool.connection() as conn:
            cur = await conn.execute(self._sql[query], params)
            return await cur.fetchall()

    async def _fenced(self, conn: AsyncConnection[Any], run_id: str, lease: Lease | None) -> None:
        if lease is not None:
            _, held = await self._head(conn, run_id)
            check_fence(run_id, lease, held, self._clock())

    async def _head(self, conn: AsyncConnection[Any], run_id: str) -> tuple[int, Lease | None]:
        """The run's last seq and current lease, read under its advisory lock."""
        cur = await conn.execute(self._sql["head"], (run_id, run_id))
        row = await cur.fetchone()
        assert row is not None
        last, owner, epoch, expires_at, ttl_s = row
        if owner is None:
            return int(last), None
        lease = Lease(
            run_id=run_id,
            owner=LeaseOwner.model_validate_json(owner),
            epoch=epoch,
            expires_at=expires_at,
            ttl_s=ttl_s,
        )
        return int(last), lease

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        return (await self.append_many(run_id, [entry], lease))[0]

    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        async with self._tx(run_id) as conn:
            last, held = await self._head(conn, run_id)
            if lease is not None:
                check_fence(run_id, lease, held, self._clock())
            if not entries:
                return []
            rows = number_entries(run_id, last, entries)
            seqs = [seq for seq, _ in rows]
            await conn.execute(self._sql["insert"], (run_id, seqs, [text for _, text in rows]))
        return seqs

    async def load(self, run_id: str) -> list[JournalEntry]:
        rows = await self._rows("load", (run_id,))
        return decode_rows(run_id, rows, f"postgres schema {self.schema}")

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        async with self._tx(meta.run_id if lease is not None else None) as conn:
            await self._fenced(conn, meta.run_id, lease)
            await conn.execute(
                self._sql["meta_put"], (meta.run_id, meta.created_at, meta.model_dump_json())
            )

    async def get_meta(self, run_id: str) -> RunMeta | None:
        rows = await self._rows("meta_get", (run_id,))
        return RunMeta.model_validate_json(rows[0][0]) if rows else None

    async def list_runs(self, *, limit: int = 100) -> list[RunMeta]:
        return [RunMeta.model_validate_json(r[0]) for r in await self._rows("meta_list", (limit,))]

    async def delete(self, run_id: str) -> None:
        async with self._tx(run_id) as conn:
            for statement in self._deletes:
                await conn.execute(statement, (run_id,))

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        async with self._tx(lease.run_id if lease is not None else None) as conn:
            if lease is not None:
                await self._fenced(conn, lease.run_id, lease)
            await conn.execute(self._sql["blob_put"], (key, bytes(data)))

    async def get_blob(self, key: str) -> bytes | None:
        rows = await self._rows("blob_get", (key,))
        return bytes(rows[0][0]) if rows else None

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        text = effect_json(run_id, row)
        async with self._tx() as conn:
            await conn.execute(self._sql["effect_put"], (run_id, text))

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in await self._rows("effect_load", (run_id,))]

    async def acquire(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> Lease:
        async with self._tx(run_id) as conn:
            _, held = await self._head(conn, run_id)
            now = self._clock()
            check_acquire(run_id, held, owner, ttl_s, now)
            cur = await conn.execute(self._sql["epoch_get"], (run_id,))
            row = await cur.fetchone()
            lease = new_lease(run_id, owner, 0 if row is None else int(row[0]), ttl_s, now)
            await conn.execute(self._sql["epoch_put"], (run_id, lease.epoch))
            await self._put_lease(conn, lease)
        return lease

    async def _put_lease(self, conn: AsyncConnection[Any], lease: Lease) -> None:
        params = (
            lease.run_id,
            lease.owner.model_dump_json(),
            lease.epoch,
            lease.expires_at,
            lease.ttl_s,
        )
        await conn.execute(self._sql["lease_put"], params)

    async def renew(self, lease: Lease) -> Lease:
        async with self._tx(lease.run_id) as conn:
            _, held = await self._head(conn, lease.run_id)
            fresh = renewed(lease, held, self._clock())
            await self._put_lease(conn, fresh)
        return fresh

    async def release(self, lease: Lease) -> None:
        async with self._tx(lease.run_id) as conn:
            _, held = await self._head(conn, lease.run_id)
            if releases(lease, held):
                await conn.execute(self._sql["lease_del"], (lease.run_id,))

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
