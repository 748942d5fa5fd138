"""A finished run's settle rides its worker's next claim on PostgreSQL (`ClaimRiding`, issue 48).

The settle entry and settled meta commit in the claim's transaction, with the run's claim reported and its
lease released. Nobody sees the settle before that commit (not the run's handle, not another process); a
fence that fails writes nothing and the claim goes on; a worker that dies before the claim commits leaves
the run as after any crash before its settle: another worker resumes it, replays the durable reply, settles
once, and nothing is paid twice.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import psycopg
import pytest
import worker_app
from workerkit import request_lines, requests, spawn_worker, wait_until, workers

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.queue import ClaimRequest
from tether.journal.keys import SETTLE_KEY
from tether.stores.codec import number_entries
from tether.stores.leases import current_owner
from tether.stores.postgres import PostgresStore
from tether.testing import Reply

pytestmark = pytest.mark.timeout(120)


def settles(entries: list[JournalEntry]) -> list[str]:
    return [e.value["status"] for e in entries if e.key == SETTLE_KEY and isinstance(e.value, dict)]


@tether.workflow(name="carried_agent")
async def one_turn(ctx: tether.Ctx, i: int) -> str:
    return await ctx.agent(f"hello {i}")


def _engine(store_url: str) -> tether.Engine:
    return tether.Engine(
        models=[tether.models.fake("fake", script=lambda _: Reply(text="ok", input_tokens=10, output_tokens=2),
                                   prices={"m": tether.Price(input=1.0, output=2.0)})],
        routing={"loop": "fake:m"}, store=store_url, workflows=[one_turn],
    )


def _request(limit: int = 1) -> ClaimRequest:
    return ClaimRequest(worker="w", queues=["q"], workflows=["carried_agent"], limit=limit, ttl_s=30.0, drives=True)


async def test_the_handle_sees_the_settle_only_once_the_claim_carrying_it_commits(store_url: str) -> None:
    engine, other = _engine(store_url), _engine(store_url)  # `other`: another process's view of the store
    store = await engine.store()
    assert isinstance(store, PostgresStore)
    await engine.enqueue(one_turn, {"i": 1}, run_id="r1", queue="q")
    await engine.enqueue(one_turn, {"i": 2}, run_id="r2", queue="q")
    (claim,) = await store.claim(_request())
    woken = asyncio.Event()
    store.ride_claims(woken.set)
    handle = engine.start(one_turn, {"i": 1}, run_id="r1")
    await asyncio.wait_for(woken.wait(), 30)
    assert store.parked() == 1 and not handle.done
    seen = await (await other.store()).load("r1")
    assert settles(seen) == [] and [e.kind for e in seen][-1] == "agent"  # the reply is durable already
    meta = await (await other.store()).get_meta("r1")
    assert meta is not None and meta.status == "running"

    (next_claim,) = await store.claim(_request())  # carries r1's settle, claims r2
    assert next_claim.run_id == "r2"
    outcome = await handle
    assert outcome.status == "ok" and outcome.value == "ok"
    assert settles(await (await other.store()).load("r1")) == ["ok"]
    meta = await (await other.store()).get_meta("r1")
    assert meta is not None and meta.status == "ok"
    entry = await store.queue_entry("r1")
    assert entry is not None and entry.state == "done"  # reported by the same claim
    assert await store.lease_of("r1") is None  # and its lease released
    assert await store.finish(claim, "done")  # the worker's own report has nothing left to send
    store.ride_claims(None)
    await store.finish(next_claim, "queued")
    await engine.close()
    await other.close()


async def test_a_worker_that_stops_riding_writes_the_waiting_settle_on_its_own(store_url: str) -> None:
    engine = _engine(store_url)
    store = await engine.store()
    assert isinstance(store, PostgresStore)
    await engine.enqueue(one_turn, {"i": 1}, run_id="r1", queue="q")
    (claim,) = await store.claim(_request())
    woken = asyncio.Event()
    store.ride_claims(woken.set)
    handle = engine.start(one_turn, {"i": 1}, run_id="r1")
    await asyncio.wait_for(woken.wait(), 30)
    store.ride_claims(None)  # no claim is coming: what waits is written now
    outcome = await handle
    assert outcome.status == "ok"
    assert settles(await store.load("r1")) == ["ok"]
    entry = await store.queue_entry("r1")
    assert entry is not None and entry.state == "claimed"  # reported as before, by the worker
    assert await store.finish(claim, "done")
    entry = await store.queue_entry("r1")
    assert entry is not None and entry.state == "done"
    assert await store.lease_of("r1") is None
    await engine.close()


async def test_a_carried_settle_whose_fence_fails_is_not_written_and_the_claim_still_works(
    store_url: str, pg_dsn: str, pg_schema: str
) -> None:
    engine = _engine(store_url)
    store = await engine.store()
    assert isinstance(store, PostgresStore)
    await engine.enqueue(one_turn, {"i": 1}, run_id="r1", queue="q")
    await engine.enqueue(one_turn, {"i": 2}, run_id="r2", queue="q")
    (claim,) = await store.claim(_request())
    lease = await store.acquire("r1", current_owner(), 30.0)
    before = await store.load("r1")
    woken = asyncio.Event()
    store.ride_claims(woken.set)
    settle = JournalEntry(kind="decision", key=SETTLE_KEY, label="settle", value={"decision": "settle", "status": "ok"})
    writing = asyncio.create_task(store.append_last_rows("r1", number_entries("r1", len(before), [settle]), lease))
    await asyncio.wait_for(woken.wait(), 30)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the lease lapses (a partition, a stalled host)
        conn.execute(f'UPDATE "{pg_schema}".leases SET expires_at = 0 WHERE run_id = %s', ("r1",))

    claims = await store.claim(_request())
    assert [c.run_id for c in claims] == ["r2"]  # the claim went on
    with pytest.raises(tether.LeaseHeldError):
        await writing
    assert await store.load("r1") == before  # nothing written
    entry = await store.queue_entry("r1")
    assert entry is not None and entry.state == "claimed" and entry.claim_id == claim.claim_id  # not reported
    store.ride_claims(None)
    await engine.close()


@pytest.mark.parametrize("when", ["parked", "claim"])
async def test_a_worker_killed_before_the_claim_carrying_a_settle_commits_leaves_the_run_to_be_resumed_once(
    client: tether.Engine, store_url: str, request_log: Path, when: str
) -> None:
    # `parked`: SIGKILL as the settle parks, before the claim is sent; `claim`: once the claim carrying it ran in
    # the database, before its transaction commits (rolled back when the connection drops)
    store = await client.store()
    assert isinstance(store, PostgresStore)
    a = spawn_worker(store_url, request_log, ttl=2.0, concurrency=1, env_extra={"WORKER_DIE_CARRYING": when})
    with workers(a):
        run_id = await client.enqueue(worker_app.chain, {"tag": "c", "n": 1}, run_id="carried")
        assert await asyncio.to_thread(a.proc.wait, 60) == -signal.SIGKILL
    assert requests(request_log)[("crash", f"carrying {run_id}")] == 1
    journal = await store.load(run_id)
    assert settles(journal) == [] and journal[-1].kind == "agent"  # the reply was durable, the settle never
    meta = await store.get_meta(run_id)
    assert meta is not None and meta.status == "running"

    b = spawn_worker(store_url, request_log, ttl=2.0, concurrency=1)
    with workers(b):
        outcome = await client.wait(run_id, timeout=60)
        b.wait_for(f"run {run_id}: taken over")
        await wait_until(lambda: f"run {run_id}: ok" in b.output, what="B's log of the settle")
    assert outcome.status == "ok"
    assert outcome.value == [f"c step 0 by {a.proc.pid}"]  # A's reply, replayed from the journal
    sent = requests(request_log)
    assert sent[("start", "c step 0")] == 1 and sent[("done", "c step 0")] == 1  # paid once
    assert all(r.pid == a.proc.pid for r in request_lines(request_log) if r.event != "crash")
    assert settles(await store.load(run_id)) == ["ok"]  # settled once
    entry = await store.queue_entry(run_id)
    assert entry is not None and entry.state == "done"
    meta = await store.get_meta(run_id)
    assert meta is not None and meta.status == "ok"
