"""Retention on PostgreSQL: delete many runs in one transaction, count what the schema holds, VACUUM it.

A delete takes each run's advisory lock (the one every fenced write of the run takes), so no append, meta or
blob write of a deleted run lands after it. A run's budget reservations still held are charged to their window
first, as a reclaim charges them (`postgres_budgets`), so a window never keeps a hold nobody can settle; the
window rows, being a scope's spend over time rather than a run's, stay. Lease epochs stay (docs/retention.md).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tether.contracts.retention import CompactResult, RunRewrite, RunSize, StoreStats
from tether.stores.codec import check_rows, effect_json

RUN_TABLES = ("entries", "meta", "effects", "leases", "queue")
"""The tables keyed by `run_id` whose rows a delete removes whole (`epochs` stays)."""


async def delete_runs(conn: Any, schema: str, run_ids: Sequence[str], keep_blobs: Collection[str]) -> dict[str, int]:
    """Every row of `run_ids`, in the caller's transaction; the rows deleted by table."""
    s = f'"{schema}"'
    ids = list(run_ids)
    await conn.execute("SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtext(r) AS h"
                       " FROM unnest(%s::text[]) AS r ORDER BY h) AS q", (ids,))
    counts: dict[str, int] = {}
    for table in RUN_TABLES:
        counts[table] = (await conn.execute(f"DELETE FROM {s}.{table} WHERE run_id = ANY(%s)", (ids,))).rowcount
    held = await (await conn.execute(
        f"SELECT scope, window_start, sum(amount_usd) FROM {s}.budget_reservations WHERE run_id = ANY(%s)"
        f" AND state = 'held' GROUP BY 1, 2 ORDER BY 1, 2", (ids,))).fetchall()
    for scope, window, total in held:  # in (scope, window) order, as every budget write locks them
        await conn.execute(f"UPDATE {s}.budget_windows SET held_usd = held_usd - %s, charged_usd = charged_usd + %s"
                           f" WHERE scope = %s AND window_start = %s", (total, total, scope, window))
    counts["budget_reservations"] = (await conn.execute(
        f"DELETE FROM {s}.budget_reservations WHERE run_id = ANY(%s)", (ids,))).rowcount
    counts["blobs"] = (await conn.execute(
        f"DELETE FROM {s}.blobs WHERE split_part(key, '/', 1) = ANY(%s) AND NOT (key = ANY(%s))",
        (ids, list(keep_blobs)))).rowcount
    return counts


async def rewrite_run(conn: Any, schema: str, rewrite: RunRewrite) -> None:
    """`RewritingStore.rewrite_run` in the caller's transaction, under the run's advisory lock (every fenced write of
    the run takes it): entries and blobs updated in place, the meta, the effect rows, the appended decisions."""
    s, run_id = f'"{schema}"', rewrite.run_id
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (run_id,))
    (last,) = await _one(conn, f"SELECT coalesce(max(seq), 0) FROM {s}.entries WHERE run_id = %s", (run_id,))
    check_rows(run_id, int(last), rewrite.append)
    async with conn.cursor() as cur:
        await cur.executemany(f"UPDATE {s}.entries SET json = %s WHERE run_id = %s AND seq = %s",
                              [(text, run_id, seq) for seq, text in rewrite.entries.items()])
        await cur.executemany(f"INSERT INTO {s}.entries (run_id, seq, json) VALUES (%s, %s, %s)",
                              [(run_id, seq, text) for seq, text in rewrite.append])
        await cur.executemany(f"UPDATE {s}.blobs SET data = %s WHERE key = %s",
                              [(data, key) for key, data in rewrite.blobs.items()])
        if rewrite.meta_json is not None:
            await cur.execute(f"UPDATE {s}.meta SET json = %s WHERE run_id = %s", (rewrite.meta_json, run_id))
        if rewrite.effects is not None:
            await cur.execute(f"DELETE FROM {s}.effects WHERE run_id = %s", (run_id,))
            await cur.executemany(f"INSERT INTO {s}.effects (run_id, json) VALUES (%s, %s)",
                                  [(run_id, effect_json(run_id, row)) for row in rewrite.effects])


async def _one(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    row = await (await conn.execute(sql, params)).fetchone()
    assert row is not None
    return tuple(row)


async def _disk(conn: Any, schema: str) -> int:
    (size,) = await _one(conn, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c"
                         " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                         (schema,))
    return int(size)


async def store_stats(conn: Any, schema: str, largest: int) -> StoreStats:
    s = f'"{schema}"'
    (runs,) = await _one(conn, f"SELECT count(*) FROM (SELECT run_id FROM {s}.meta UNION SELECT run_id FROM"
                         f" {s}.entries) AS q")
    entries, entry_bytes = await _one(conn, f"SELECT count(*), coalesce(sum(octet_length(json)), 0) FROM {s}.entries")
    effects, effect_bytes = await _one(conn, f"SELECT count(*), coalesce(sum(octet_length(json)), 0) FROM {s}.effects")
    (meta_bytes,) = await _one(conn, f"SELECT coalesce(sum(octet_length(json)), 0) FROM {s}.meta")
    blobs, blob_bytes = await _one(conn, f"SELECT count(*), coalesce(sum(octet_length(data)), 0) FROM {s}.blobs")
    top = await (await conn.execute(
        f"SELECT run_id, sum(n)::bigint, sum(b)::bigint FROM (SELECT run_id, 1 AS n, octet_length(json) AS b"
        f" FROM {s}.entries UNION ALL SELECT run_id, 0, octet_length(json) FROM {s}.effects"
        f" UNION ALL SELECT run_id, 0, octet_length(json) FROM {s}.meta) AS q GROUP BY run_id ORDER BY 3 DESC, 1"
        f" LIMIT %s", (largest,))).fetchall()
    return StoreStats(
        store="postgresql", runs=runs, entries=entries,
        bytes=int(entry_bytes) + int(effect_bytes) + int(meta_bytes) + int(blob_bytes), blobs=blobs,
        blob_bytes=int(blob_bytes), effects=effects, largest=[RunSize(run_id=r, entries=n, bytes=b) for r, n, b in top],
        on_disk_bytes=await _disk(conn, schema),
    )


async def compact(conn: Any, schema: str) -> CompactResult:
    """VACUUM ANALYZE every table of the schema (on an autocommit connection: VACUUM runs outside a transaction).
    A plain VACUUM makes dead rows' space reusable without locking writers out; the file shrinks only at its end."""
    before = await _disk(conn, schema)
    tables = await (await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                                       (schema,))).fetchall()
    for (table,) in tables:
        await conn.execute(f'VACUUM (ANALYZE) "{schema}"."{table}"')
    return CompactResult(store="postgresql", action="VACUUM (ANALYZE)", before_bytes=before,
                         after_bytes=await _disk(conn, schema))
