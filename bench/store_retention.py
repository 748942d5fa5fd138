"""Retention figures: delete a 1,000-step run, and sweep 10,000 runs, on SQLite and PostgreSQL (time per run).

The reference for the delete is a raw driver deleting the same run's rows (entries, meta, blobs) in one
transaction, as a user would by hand; the sweep's figure is the time per run swept, listing included. Rows are
written beforehand through the store (the 1,000-step run) or in bulk (the 10,000 runs); only the delete and the
sweep are timed. PostgreSQL uses `TETHER_BENCH_PG` (default `postgresql://postgres@127.0.0.1:5432/test`) in a
throwaway schema.

Run alone: `python bench/store_retention.py` (both figures on both stores).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
import uuid
import warnings
from typing import Any

from tether.contracts.entries import JournalEntry, RunMeta
from tether.contracts.usage import Usage
from tether.stores.codec import number_entries

PG_DSN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _entry(i: int) -> JournalEntry:
    return JournalEntry(kind="step", status="ok", key=f"{i:064x}", label=f"s{i}",
                        value={"output": "The quick brown fox jumps over the lazy dog. " * 4},
                        usage=Usage(input_tokens=1200, output_tokens=340), cost_usd=0.0042, started_at=1.7e9 + i)


def _meta(run_id: str, at: float) -> RunMeta:
    return RunMeta(run_id=run_id, workflow="wf", status="ok", created_at=at, updated_at=at)


def _store(kind: str, where: str) -> Any:
    from tether.stores import open_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_store(f"sqlite:///{where}/r.db" if kind == "sqlite" else f"{PG_DSN}?schema={where}")


async def _drop(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def delete_run(kind: str, steps: int = 1_000, rounds: int = 3) -> dict[str, Any]:
    """Seconds to `engine.delete` one run of `steps` entries and 20 blobs, against a raw transaction deleting the
    same rows; the best of `rounds`."""
    from tether.engine import retention

    async def one(raw: bool) -> float:
        where = tempfile.mkdtemp() if kind == "sqlite" else f"bench_{uuid.uuid4().hex[:12]}"
        store = _store(kind, where)
        try:
            await store.append_many("big", [_entry(i) for i in range(steps)])
            await store.put_meta(_meta("big", 1.0))
            for i in range(20):
                await store.put_blob(f"big/checkpoints/{i}", b"x" * 4096)
            await store.put_meta(_meta("other", 2.0))
            if not raw:
                start = time.perf_counter()
                await retention.delete(store, "big")
                return time.perf_counter() - start
            if kind == "sqlite":  # connected before the clock starts, as the store is
                with sqlite3.connect(f"{where}/r.db", isolation_level=None) as c:
                    c.execute("PRAGMA synchronous = NORMAL")  # as the store's connection
                    start = time.perf_counter()
                    c.execute("BEGIN IMMEDIATE")
                    for table in ("entries", "meta", "effects", "leases"):
                        c.execute(f"DELETE FROM {table} WHERE run_id = ?", ("big",))
                    c.execute("DELETE FROM blobs WHERE key >= 'big/' AND key < 'big0'")
                    c.execute("COMMIT")
                    return time.perf_counter() - start
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_DSN) as conn:
                start = time.perf_counter()
                for table in ("entries", "meta", "effects", "leases", "queue"):
                    await conn.execute(f'DELETE FROM "{where}".{table} WHERE run_id = %s', ("big",))
                await conn.execute(f"DELETE FROM \"{where}\".blobs WHERE key LIKE 'big/%%'")
                await conn.commit()
                return time.perf_counter() - start
        finally:
            await store.close()
            if kind != "sqlite":
                await _drop(where)

    return {"tether_s": min(asyncio.run(one(False)) for _ in range(rounds)),
            "raw_s": min(asyncio.run(one(True)) for _ in range(rounds)), "steps": steps}


def sweep_runs(kind: str, runs: int = 10_000) -> dict[str, Any]:
    """Seconds per run for `tether sweep` over `runs` settled runs of 3 entries and a blob each."""
    from tether.engine import retention

    async def main() -> dict[str, Any]:
        where = tempfile.mkdtemp() if kind == "sqlite" else f"bench_{uuid.uuid4().hex[:12]}"
        store = _store(kind, where)
        try:
            await store.put_meta(_meta("seed", 0.0))  # creates the schema
            ids = [f"run-{i:05d}" for i in range(runs)]
            rows = [(r, seq, text) for r in ids for seq, text in number_entries(r, 0, [_entry(i) for i in range(3)])]
            metas = [(r, 1.0 + i, _meta(r, 1.0 + i).model_dump_json()) for i, r in enumerate(ids)]
            blobs = [(f"{r}/checkpoints/2", b"x" * 512) for r in ids]
            if kind == "sqlite":
                with sqlite3.connect(f"{where}/r.db") as c:
                    c.executemany("INSERT INTO entries (run_id, seq, json) VALUES (?, ?, ?)", rows)
                    c.executemany("INSERT INTO meta (run_id, created_at, json) VALUES (?, ?, ?)", metas)
                    c.executemany("INSERT INTO blobs (key, data) VALUES (?, ?)", blobs)
            else:
                import psycopg

                async with await psycopg.AsyncConnection.connect(PG_DSN) as conn:
                    cur = conn.cursor()
                    await cur.executemany(f'INSERT INTO "{where}".entries (run_id, seq, json) VALUES (%s, %s, %s)',
                                          rows)
                    await cur.executemany(f'INSERT INTO "{where}".meta (run_id, created_at, status, json) VALUES '
                                          f"(%s, %s, 'ok', %s)", metas)
                    await cur.executemany(f'INSERT INTO "{where}".blobs (key, data) VALUES (%s, %s)', blobs)
                    await conn.commit()
            start = time.perf_counter()
            report = await retention.sweep(store, before=runs + 2.0)
            took = time.perf_counter() - start
            assert len(report.deleted) == runs + 1, len(report.deleted)
            return {"total_s": took, "per_run_us": took / (runs + 1) * 1e6, "runs": runs + 1}
        finally:
            await store.close()
            if kind != "sqlite":
                await _drop(where)

    return asyncio.run(main())


if __name__ == "__main__":
    for kind in ("sqlite", "postgres"):
        print(kind, "delete", delete_run(kind))
        print(kind, "sweep", sweep_runs(kind))
