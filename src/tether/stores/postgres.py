"""`PostgresStore`: journals in PostgreSQL (psycopg 3), shared by workers on any number of hosts.

psycopg is imported here only, when the store first connects, so `import tether` never needs it.
Every write is one round trip on a `psycopg_pool` pool: a server-side function (see `postgres_sql`)
takes the run's advisory lock, checks the lease by the database's clock, checks the writer's view of
the head and inserts the rows the client numbered and checksummed with the shared codec. Concurrent
appends to one run from one store ride along in the next round trip (`group_commit`). The run queue
lives in the same schema (`postgres_queue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.errors import ConfigError, LeaseHeldError, StoreUnavailableError
from tether.contracts.queue import QueuedRun
from tether.contracts.retention import CompactResult, RunRewrite, StoreStats
from tether.stores.codec import check_rows, decode_meta, decode_rows, effect_json
from tether.stores.group_commit import GroupCommit
from tether.stores.leases import cancel_request_key, check_acquire, check_fence, renewed
from tether.stores.postgres_prefetch import Prefetch
from tether.stores.postgres_queue import PostgresQueue
from tether.stores.postgres_sql import notify_channel, schema_statements, statements
from tether.stores.run_ids import check_run_id

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

T = TypeVar("T")
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
RENEW_PATIENCE_FLOOR_S = 0.25
"""The least time a lease renewal is given before it counts as failed (see `PostgresStore.renew`)."""


def redact(dsn: str) -> str:
    """The DSN without its password (URL or `key=value` form), for messages and health lines."""
    dsn = re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", r"\1***", dsn, flags=re.IGNORECASE)


def split_dsn(dsn: str) -> tuple[str, str | None]:
    """(the DSN libpq sees, the `schema=` query parameter tether reads from it, if any)."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    if schema is None:
        return dsn, None
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def _forget(tasks: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    def done(task: asyncio.Future[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a statement we stopped waiting for may fail quietly

    return done


def _lease(run_id: str, owner: str | None, epoch: int | None, expires: float | None, ttl: float | None) -> Lease | None:
    if owner is None or epoch is None or expires is None or ttl is None:
        return None
    return Lease(
        run_id=run_id, owner=LeaseOwner.model_validate_json(owner), epoch=epoch, expires_at=expires, ttl_s=ttl
    )


class PostgresStore(PostgresQueue):
    """A journal store and run queue in one PostgreSQL schema (created on first use), with leases.

    The schema defaults to `tether`, or the URL's `?schema=NAME`. `clock` is this host's clock and
    decides nothing: lease acquisition, renewal and expiry are judged by the database's clock.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        clock: Callable[[], float] = time.time,
    ) -> None:
        conninfo, from_url = split_dsn(dsn)
        schema = schema or from_url or "tether"
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(
                f"postgres schema {schema!r} is not a plain identifier; use letters, digits and "
                f"'_' (at most 63), starting with a letter or '_'."
            )
        self.dsn = dsn
        self.conninfo = conninfo
        self.schema = schema
        self.channel = notify_channel(schema)
        self._sizes = (min_size, max_size)
        self._clock = clock
        self._pool: AsyncConnectionPool | None = None
        self._opening = asyncio.Lock()
        self._sql = statements(schema)
        self._appends = GroupCommit(self._send_append)
        self._prefetched = Prefetch()
        self._stuck: set[asyncio.Future[Any]] = set()
        self._owners: dict[LeaseOwner, str] = {}
        self._riding: dict[str, tuple[RunMeta, Lease]] = {}
        self._taken: dict[str, tuple[Lease, list[tuple[Any, ...]], float]] = {}
        """Per run: a lease a claim took for this process's driver, the reads that came with it, when (monotonic)."""
        """Per run: the meta its next append under that lease carries (`defer_meta`)."""
        self._unavailable: tuple[type[Exception], ...] = ()
        super().__init__()

    def describe(self) -> str:
        return f"{redact(self.conninfo)} (schema {self.schema})"

    # -- connections -----------------------------------------------------------------------------
    async def _ready(self) -> AsyncConnectionPool:
        """Connect, bring the schema to this version (serialized across processes), open the pool, once."""
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                await self._migrate()
                import psycopg
                from psycopg_pool import AsyncConnectionPool, PoolTimeout

                self._unavailable = (psycopg.OperationalError, PoolTimeout)

                pool = AsyncConnectionPool(
                    self.conninfo,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    # Every statement is one of ours and hot: prepare each on its first use (one extra
                    # round trip per statement and connection, then none), not after five.
                    kwargs={"autocommit": True, "prepare_threshold": 0},
                    open=False,
                )
                await pool.open(wait=True)
                self._pool = pool
            return self._pool

    async def _migrate(self) -> None:
        import psycopg

        from tether.stores.postgres_sql import SCHEMA_VERSION

        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        except psycopg.OperationalError as exc:
            why = " ".join(str(exc).split()).rstrip(".?")
            raise StoreUnavailableError(
                f"cannot connect to the PostgreSQL store {redact(self.dsn)}: {why}. "
                f"Check the store URL and that the server is up.",
                dsn=redact(self.dsn),
            ) from None
        async with conn:
            try:
                row = await (await conn.execute(self._sql["version"])).fetchone()
                if row is not None and row[0] >= SCHEMA_VERSION:
                    return
            except psycopg.errors.UndefinedTable:
                pass
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether:schema'))")
                for statement in schema_statements(self.schema):
                    await conn.execute(statement)

    def _unreachable(self, exc: Exception) -> StoreUnavailableError:
        """psycopg's connection failures as a typed, retryable error naming the DSN without its password."""
        why = " ".join(str(exc).split()).rstrip(".?")
        return StoreUnavailableError(
            f"PostgreSQL store {redact(self.dsn)} is unavailable ({why}); nothing was written. "
            f"Check that the server is up and reachable, then retry or resume the run.",
            dsn=redact(self.dsn),
        )

    async def _fetch(self, name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run one named statement on a pooled connection: one round trip."""
        pool = self._pool or await self._ready()
        try:
            conn = await pool.getconn()
            try:
                cur = await conn.execute(self._sql[name], params)
                return await cur.fetchall() if cur.pgresult is not None and cur.pgresult.ntuples else []
            finally:
                await pool.putconn(conn)
        except self._unavailable as exc:
            raise self._unreachable(exc) from None

    async def _answer(self, name: str, params: tuple[Any, ...]) -> str:
        """Run one named statement whose answer is one text value (the hot writes): one round trip, and nothing
        decoded but that value."""
        pool = self._pool or await self._ready()
        try:
            conn = await pool.getconn()
            try:
                cur = await conn.execute(self._sql[name], params)
            finally:
                await pool.putconn(conn)
        except self._unavailable as exc:
            raise self._unreachable(exc) from None
        result = cur.pgresult
        assert result is not None
        value = result.get_value(0, 0)
        assert value is not None
        return bytes(value).decode()

    async def _fetch_within(self, name: str, params: tuple[Any, ...], timeout_s: float) -> list[tuple[Any, ...]]:
        """`_fetch`, but give up waiting after `timeout_s` (the statement is left to finish or fail on its own)."""
        task = asyncio.ensure_future(self._fetch(name, params))
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            self._stuck.add(task)
            task.add_done_callback(_forget(self._stuck))
            raise StoreUnavailableError(
                f"PostgreSQL store {redact(self.dsn)} did not answer within {timeout_s:.2f} s (a network partition "
                f"or an overloaded server); the {name} may not have happened. Retry once it is reachable.",
                dsn=redact(self.dsn),
            ) from None

    def _reject(self, run_id: str, lease: Lease, row: tuple[Any, ...] | str, action: str = "append") -> NoReturn:
        """Raise the shared fencing error for a write the database refused.

        `row` is the lease it found (owner, epoch, expiry, ttl, database now), or a write's `fence:<JSON>` answer.
        """
        if isinstance(row, str):
            row = tuple(json.loads(row.partition(":")[2]))
        owner, epoch, expires, ttl, now = row
        held = _lease(run_id, owner, epoch, expires, ttl)
        check_fence(run_id, lease, held, now)
        raise LeaseHeldError(
            f"lease rejected: run '{run_id}' refused this driver's {action} at epoch {lease.epoch}; nothing "
            f"was written. Resume the run to continue under a new lease.",
            run_id=run_id,
            epoch=lease.epoch,
        )

    def _fence_args(self, lease: Lease | None) -> tuple[int | None, str | None]:
        return (None, None) if lease is None else (lease.epoch, self._owner_json(lease.owner))

    def _owner_json(self, owner: LeaseOwner) -> str:
        """An owner as the leases table stores it (remembered: every fenced write sends it)."""
        text = self._owners.get(owner)
        if text is None:
            if len(self._owners) >= 256:
                self._owners.clear()
            text = self._owners[owner] = owner.model_dump_json()
        return text

    # -- appends (group commit) --------------------------------------------------------------------
    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        check_run_id(run_id)
        self._prefetched.forget(run_id)
        return (await self._appends.append_many(run_id, [entry], lease))[0]

    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        check_run_id(run_id)
        self._prefetched.forget(run_id)
        return await self._appends.append_many(run_id, entries, lease)

    async def append_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]:
        """Append rows already encoded by `codec.encode_entry` (a segment's group commit): one round trip
        that fences the lease, checks the rows continue the head and inserts them as they are."""
        check_run_id(run_id)
        self._prefetched.forget(run_id)
        if not rows:
            await self._send_append(run_id, None, [], lease)  # the lease check alone, like every store
            return []
        after = rows[0][0] - 1
        check_rows(run_id, after, rows)
        head = await self._send_append(run_id, after, rows, lease)
        if head is not None:
            check_rows(run_id, head, rows)  # the head moved: raises JournalOrderViolation, nothing was written
        self._appends.saw_head(run_id, rows[-1][0])
        return [seq for seq, _ in rows]

    async def _send_append(
        self, run_id: str, head: int | None, rows: list[tuple[int, str]], lease: Lease | None
    ) -> int | None:
        """One append round trip: None once written, or the real head when `head` was not it."""
        if len(rows) == 1:  # one entry: plain parameters are cheaper to send than arrays
            payload: tuple[Any, ...] = (rows[0][0], rows[0][1], None, None)
        else:
            payload = (None, None, [seq for seq, _ in rows], [text for _, text in rows])
        riding = self._riding.pop(run_id, None) if rows and lease is not None else None
        if riding is not None and riding[1].epoch != lease.epoch:  # type: ignore[union-attr]
            self._riding[run_id], riding = riding, None  # another segment's: not this write's to carry
        if riding is None and payload[0] is not None:  # the hot path: one entry, no meta riding
            answer = await self._answer("append_one", (run_id, head, payload[0], payload[1], *self._fence_args(lease)))
        else:
            meta = (None, None, None) if riding is None else (riding[0].created_at, riding[0].status,
                                                              riding[0].model_dump_json())
            answer = await self._answer("append", (run_id, head, *payload, *self._fence_args(lease), *meta))
        if answer.startswith("fence:"):
            assert lease is not None
            self._reject(run_id, lease, answer)
        if answer.startswith("head:"):
            if riding is not None:
                self._riding.setdefault(run_id, riding)  # not written: the retry carries it
            return int(answer[5:])
        return None

    def _meta_to_carry(self, run_id: str, lease: Lease) -> RunMeta | None:
        riding = self._riding.get(run_id)
        if riding is None or riding[1].epoch != lease.epoch:
            return None
        del self._riding[run_id]
        return riding[0]

    def _wrote(self, run_id: str, rows: list[tuple[int, str]]) -> None:
        self._prefetched.forget(run_id)
        self._appends.saw_head(run_id, rows[-1][0])

    def defer_meta(self, meta: RunMeta, lease: Lease) -> None:
        """`MetaRiding`: the run's next append under `lease` writes `meta` in its transaction (one commit fewer);
        a later `put_meta` supersedes it, and `release` writes it on its own if no append came."""
        check_run_id(meta.run_id)
        self._riding[meta.run_id] = (meta, lease)

    # -- reads, meta, blobs, effects -------------------------------------------------------------
    async def load(self, run_id: str) -> list[JournalEntry]:
        rows: list[tuple[Any, ...]] | None = self._prefetched.rows(run_id)
        if rows is None:
            rows = await self._fetch("load", (run_id,))
        entries = decode_rows(run_id, rows, f"postgres schema {self.schema}")
        if entries:
            self._appends.saw_head(run_id, len(entries))
        return entries

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        check_run_id(meta.run_id)
        self._prefetched.forget(meta.run_id)
        self._riding.pop(meta.run_id, None)  # superseded
        params = (meta.run_id, meta.created_at, meta.status, meta.model_dump_json(), *self._fence_args(lease))
        ((answer,),) = await self._fetch("meta_put", params)
        if answer != "ok":
            assert lease is not None
            self._reject(meta.run_id, lease, answer, "meta write")

    async def get_meta(self, run_id: str) -> RunMeta | None:
        prefetched = self._prefetched.meta(run_id)
        if prefetched is not None:
            text = prefetched[0]
        else:
            rows = await self._fetch("meta_get", (run_id,))
            text = rows[0][0] if rows else None
        return decode_meta(text) if text is not None else None

    async def list_runs(self, *, limit: int = 100, status: str | None = None) -> list[RunMeta]:
        if status is None:
            rows = await self._fetch("meta_list", (limit,))
        else:
            rows = await self._fetch("meta_list_status", (status, status, limit))
        return [decode_meta(r[0]) for r in rows]

    async def delete(self, run_id: str) -> None:
        self._prefetched.forget(run_id)
        self._riding.pop(run_id, None)
        await self._fetch("delete", (run_id,))
        self._appends.forget(run_id)

    async def delete_runs(self, run_ids: Sequence[str], *, keep_blobs: Collection[str] = ()) -> dict[str, int]:
        """`RetentionStore.delete_runs`: every row of `run_ids` in one transaction (`postgres_retention`)."""
        from tether.stores import postgres_retention

        ids = list(dict.fromkeys(run_ids))
        for run_id in ids:
            self._prefetched.forget(run_id)
        counts = await self._retention(lambda conn: postgres_retention.delete_runs(conn, self.schema, ids, keep_blobs),
                                       transaction=True)
        for run_id in ids:
            self._prefetched.forget(run_id)
            self._appends.forget(run_id)
        return counts

    async def rewrite_run(self, rewrite: RunRewrite) -> None:
        """`RewritingStore.rewrite_run` in one transaction (`postgres_retention`)."""
        from tether.stores import postgres_retention

        self._prefetched.forget(rewrite.run_id)
        await self._retention(lambda conn: postgres_retention.rewrite_run(conn, self.schema, rewrite), transaction=True)
        self._prefetched.forget(rewrite.run_id)
        self._appends.forget(rewrite.run_id)

    async def store_stats(self, *, largest: int = 5) -> StoreStats:
        from tether.stores import postgres_retention

        return await self._retention(lambda conn: postgres_retention.store_stats(conn, self.schema, largest))

    async def compact(self) -> CompactResult:
        from tether.stores import postgres_retention

        return await self._retention(lambda conn: postgres_retention.compact(conn, self.schema))

    async def _retention(self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False) -> T:
        pool = self._pool or await self._ready()
        try:
            async with pool.connection() as conn:
                if not transaction:
                    return await work(conn)
                async with conn.transaction():
                    return await work(conn)
        except self._unavailable as exc:
            raise self._unreachable(exc) from None

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        run_id = lease.run_id if lease is not None else None
        self._prefetched.forget_key(key)
        ((answer,),) = await self._fetch("blob_put", (key, bytes(data), run_id, *self._fence_args(lease)))
        if answer != "ok":
            assert lease is not None
            self._reject(lease.run_id, lease, answer, "blob write")

    async def get_blob(self, key: str) -> bytes | None:
        prefetched = self._prefetched.blob(key)
        if prefetched is not None:
            return prefetched[0]
        rows = await self._fetch("blob_get", (key,))
        return bytes(rows[0][0]) if rows else None

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        check_run_id(run_id)
        await self._fetch("effect_put", (run_id, effect_json(run_id, row)))

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in await self._fetch("effect_load", (run_id,))]

    # -- leases (the database's clock) -------------------------------------------------------------
    async def acquire(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> Lease:
        check_run_id(run_id)
        check_acquire(run_id, None, owner, ttl_s, 0.0)  # validates ttl_s
        takeover: int | None = None
        self._prefetched.forget(run_id)
        self._riding.pop(run_id, None)  # a new segment writes its own
        taken = self._taken.pop(run_id, None)
        if taken is not None and taken[0].owner.model_copy(update={"owner_id": owner.owner_id}) == owner:
            if taken[0].ttl_s == ttl_s and time.monotonic() - taken[2] < ttl_s / 10:
                # this process's first driver of a run its worker just claimed takes the claim's lease, owner id
                # and all (a fresh one, so its holder renews it on time)
                self._keep_reads(run_id, taken[1])
                return taken[0]
            takeover = taken[0].epoch  # stale: taken over below, as this process's own
        await self._flush_release(run_id)  # our own earlier lease of the run goes first
        for _ in range(3):
            params = (run_id, self._owner_json(owner), owner.owner_id, ttl_s, takeover, cancel_request_key(run_id))
            rows = await self._fetch("acquire", params)
            outcome, owner_json, epoch, expires, ttl, now = rows[0][:6]
            held = _lease(run_id, owner_json, epoch, expires, ttl)
            assert held is not None
            if outcome == "ok":
                self._keep_reads(run_id, rows[1:])
                return held.model_copy(update={"owner": owner})
            check_acquire(run_id, held, owner, ttl_s, now)  # raises unless the holder is provably dead here
            takeover = held.epoch
        raise LeaseHeldError(
            f"lease held: run '{run_id}' changed hands three times while this driver tried to take it over; "
            f"nothing was written. Retry in a moment.",
            run_id=run_id,
        )

    async def enqueue(self, run: QueuedRun, meta: RunMeta, genesis: JournalEntry | None) -> bool:
        check_run_id(run.run_id)  # the queue writes the run's meta and journal too: the same rule first
        return await super().enqueue(run, meta, genesis)

    def _took_at_claim(self, run_id: str, owner: LeaseOwner, rows: list[tuple[Any, ...]]) -> None:
        outcome, owner_json, epoch, expires, ttl = rows[0][:5]
        held = _lease(run_id, owner_json, epoch, expires, ttl)
        if outcome == "ok" and held is not None:
            if len(self._taken) >= 1024:
                self._taken.clear()
            self._taken[run_id] = (held.model_copy(update={"owner": owner}), rows[1:], time.monotonic())

    def _untaken(self, run_id: str) -> int | None:
        taken = self._taken.pop(run_id, None)
        return None if taken is None else taken[0].epoch

    def _keep_reads(self, run_id: str, reads: list[tuple[Any, ...]]) -> None:
        """Keep what the acquire read after taking the lease: journal rows ('e'), meta ('m'), cancel request ('b')."""
        rows = [(r[6], r[7]) for r in reads if r[0] == "e"]
        meta = next((r[7] for r in reversed(reads) if r[0] == "m"), None)
        cancel = next((bytes(r[8]) for r in reversed(reads) if r[0] == "b"), None)
        self._prefetched.keep(run_id, rows, meta, cancel)

    async def renew(self, lease: Lease) -> Lease:
        # A renewal slower than a quarter of the TTL (never less than RENEW_PATIENCE_FLOOR_S, so a busy
        # server is not mistaken for a dead link) counts as failed at once, so a driver cut off from the
        # database stops on time (a cancelled psycopg query can take seconds to give up on a dead link).
        # Safety never rests on this wait: the database fences every write by its own clock.
        ((outcome, owner, epoch, expires, ttl, now, cancel),) = await self._fetch_within(
            "renew", (lease.run_id, *self._fence_args(lease), cancel_request_key(lease.run_id)),
            max(lease.ttl_s / 4, RENEW_PATIENCE_FLOOR_S),
        )
        held = _lease(lease.run_id, owner, epoch, expires, ttl)
        if outcome == "ok" and held is not None:
            self._prefetched.keep_cancel(lease.run_id, None if cancel is None else bytes(cancel))
            return held
        renewed(lease, held, now)  # raises the shared "lease lost" error
        raise LeaseHeldError(f"lease lost: run '{lease.run_id}' refused the renewal of epoch {lease.epoch}.",
                             run_id=lease.run_id, epoch=lease.epoch)

    async def release(self, lease: Lease) -> None:
        riding = self._riding.pop(lease.run_id, None)
        if riding is not None and riding[1].epoch == lease.epoch:  # no append carried it: written before the release
            with contextlib.suppress(LeaseHeldError, StoreUnavailableError):
                await self.put_meta(riding[0], lease)
        self._prefetched.forget(lease.run_id)
        if not self._release_at_finish(lease):
            await self._fetch("release", (lease.run_id, lease.epoch))

    async def lease_of(self, run_id: str) -> Lease | None:
        """The run's current lease, live or expired (for operators and tests), or None."""
        await self._flush_release(run_id)
        rows = await self._fetch("lease_get", (run_id,))
        return _lease(run_id, *rows[0][:4]) if rows else None

    async def close(self) -> None:
        await self._appends.close()
        for run_id in list(self._releases):
            with contextlib.suppress(StoreUnavailableError):
                await self._flush_release(run_id)
        for task in list(self._stuck):
            task.cancel()
        if self._stuck:
            await asyncio.wait(list(self._stuck), timeout=1.0)
        await self._close_listener()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
