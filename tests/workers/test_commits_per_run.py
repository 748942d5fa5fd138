"""Commits per run on PostgreSQL, read from the WAL: a worker's empty run and one-turn agent (issue 48).

Counted exactly: the transactions whose COMMIT record lies between two WAL positions and that wrote a
block of one of this test's own tables (`pg_walinspect`), so other work on the server never counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import psycopg
import pytest
from workerkit import wait_until

import tether
from tether.testing import Reply
from tether.worker import Worker

pytestmark = pytest.mark.timeout(120)
RUNS = 6


@tether.workflow(name="commits_empty")
async def empty(ctx: tether.Ctx, i: int) -> int:
    return i


@tether.workflow(name="commits_agent")
async def one_turn(ctx: tether.Ctx, i: int) -> str:
    return await ctx.agent(f"hello {i}")


def _wal(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")  # (another test may create it at once)
    return conn


def _write_commits(conn: psycopg.Connection[Any], schema: str, start: str, end: str) -> int:
    """Transactions committed between two WAL positions that wrote a block of a relation of `schema`."""
    nodes = {str(r[0]) for r in conn.execute(
        """SELECT pg_relation_filenode(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND pg_relation_filenode(c.oid) IS NOT NULL
           UNION SELECT pg_relation_filenode(t.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_class t ON t.oid = c.reltoastrelid WHERE n.nspname = %s""", (schema, schema)).fetchall()}
    rows = conn.execute(
        """SELECT xid::text, string_agg(block_ref, ' '), bool_or(resource_manager = 'Transaction'
                  AND record_type LIKE 'COMMIT%%')
             FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) WHERE xid::text <> '0' GROUP BY xid""",
        (start, end)).fetchall()
    rel = re.compile(r"rel \d+/\d+/(\d+)")
    return sum(1 for _, refs, committed in rows if committed and nodes & set(rel.findall(refs or "")))


def _flushed(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


async def _commits(store_url: str, schema: str, wf: tether.Workflow[Any, Any]) -> int:
    """Write commits for RUNS runs of `wf` queued first, then driven one at a time by a worker, until the
    last one's claim is reported done."""
    engine = tether.Engine(
        models=[tether.models.fake("fake", script=lambda _: Reply(text="ok", input_tokens=10, output_tokens=2),
                                   prices={"m": tether.Price(input=1.0, output=2.0)})],
        routing={"loop": "fake:m"}, store=store_url, workflows=[empty, one_turn],
    )
    for i in range(RUNS):
        await engine.enqueue(wf, {"i": i}, run_id=f"r{i}", queue="q")
    store = await engine.store()
    with _wal(store_url.partition("?")[0]) as wal:
        start = _flushed(wal)
        stop = asyncio.Event()
        worker = Worker(engine, queues=["q"], concurrency=1, poll_s=0.05, log=lambda _: None)
        task = asyncio.create_task(worker.run(stop))
        done: list[int] = []

        async def finished() -> None:
            entries = [await store.queue_entry(f"r{i}") for i in range(RUNS)]  # type: ignore[attr-defined]
            done[:] = [1 for e in entries if e is not None and e.state == "done"]

        async def poll() -> None:
            while len(done) < RUNS:
                await finished()
                await asyncio.sleep(0.02)

        await asyncio.wait_for(poll(), 60)
        await wait_until(lambda: worker.stats.settled == RUNS, what="every run settled")
        end = _flushed(wal)
        stop.set()
        await task
        commits = _write_commits(wal, schema, start, end)
    await engine.close()
    return commits


async def test_an_empty_run_costs_a_worker_one_commit(store_url: str, pg_schema: str) -> None:
    # per run: the claim that takes it with its lease and carries the run before's settle entry, settled meta,
    # report and lease release (`ClaimRiding`); the last run's settle rides one more claim (before: two per run,
    # the claim and the settle)
    assert await _commits(store_url, pg_schema, empty) <= RUNS + 1


async def test_a_one_turn_agent_costs_a_worker_three_commits(store_url: str, pg_schema: str) -> None:
    # per run: the claim and lease (carrying the run before's settle); the agent's dispatch record with the running
    # meta; its reply, durable before the body sees it; the settle rides the next claim (before: four, with the
    # settle on its own; seven before the claim took the lease and the meta rode the journal writes)
    assert await _commits(store_url, pg_schema, one_turn) <= 3 * RUNS + 1


async def _claimed(store_url: str, ttl_s: float, run_id: str = "r") -> tuple[tether.Engine, Any, Any]:
    from tether.contracts.queue import ClaimRequest

    engine = tether.Engine(store=store_url, workflows=[empty])
    await engine.enqueue(empty, {"i": 1}, run_id=run_id, queue="q")
    store = await engine.store()
    (claim,) = await store.claim(ClaimRequest(worker="w", queues=["q"], workflows=["commits_empty"], limit=1,  # type: ignore[attr-defined]
                                              ttl_s=ttl_s, drives=True))
    return engine, store, claim


async def test_a_claim_that_drives_hands_its_lease_to_the_first_driver_here(store_url: str) -> None:
    from tether.stores.leases import current_owner

    engine, store, _ = await _claimed(store_url, 30.0)
    held = await store.lease_of("r")
    assert held is not None
    lease = await store.acquire("r", current_owner(), 30.0)
    assert lease.epoch == held.epoch  # the claim's lease, not a new one
    assert [e.kind for e in await store.load("r")] == ["decision"]  # the genesis, read with the claim
    await engine.close()


async def test_a_stale_claim_lease_is_taken_over_by_this_process_and_an_unused_one_released_at_finish(
    store_url: str,
) -> None:
    from tether.stores.leases import current_owner

    engine, store, _ = await _claimed(store_url, 1.0)
    held = await store.lease_of("r")
    assert held is not None
    await asyncio.sleep(0.2)  # past a tenth of the TTL: the driver takes the run over as its own
    lease = await store.acquire("r", current_owner(), 1.0)
    assert lease.epoch == held.epoch + 1
    await store.release(lease)
    await engine.close()

    engine, store, claim = await _claimed(store_url, 30.0, "r2")  # claimed, never driven
    assert await store.lease_of("r2") is not None
    assert await store.finish(claim, "queued")
    assert await store.lease_of("r2") is None
    await engine.close()
