"""PostgreSQL specifics: one total order across pools, and the run queue (claims, caps, takeovers, wake-ups)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from tether.contracts.entries import JournalEntry, RunMeta
from tether.contracts.errors import ConfigError, LeaseHeldError, StoreUnavailableError
from tether.contracts.queue import ClaimRequest, QueuedRun, queue_topic, settled_topic
from tether.stores.postgres import PostgresStore
from tether.testing.store_kit import NO_SUCH_PID, entry, owner


async def test_two_pools_appending_concurrently_get_one_total_order(
    pg_dsn: str, pg_schema: str
) -> None:
    one = PostgresStore(pg_dsn, schema=pg_schema, max_size=4)
    two = PostgresStore(pg_dsn, schema=pg_schema, max_size=4)
    await one.load("warm-up")  # create the schema once

    async def writer(store: PostgresStore, tag: str) -> None:
        for i in range(25):
            await store.append_many("r", [entry(f"{tag}-{i}-a"), entry(f"{tag}-{i}-b")])

    await asyncio.gather(*(writer(s, t) for s, t in [(one, "p"), (two, "q"), (one, "r")]))
    loaded = await two.load("r")
    assert [e.seq for e in loaded] == list(range(1, 151))
    for n in range(0, 150, 2):  # every batch stayed contiguous
        assert loaded[n].key[:-2] == loaded[n + 1].key[:-2]
    await one.close()
    await two.close()


async def test_a_second_store_opening_the_same_schema_is_harmless(
    pg_dsn: str, pg_schema: str
) -> None:
    stores = [PostgresStore(pg_dsn, schema=pg_schema) for _ in range(3)]
    await asyncio.gather(*(s.append(f"run-{i}", entry("a")) for i, s in enumerate(stores)))
    assert [len(await stores[0].load(f"run-{i}")) for i in range(3)] == [1, 1, 1]
    for s in stores:
        await s.close()


async def test_an_unreachable_server_is_store_unavailable_without_the_password() -> None:
    store = PostgresStore("postgresql://user:s3cret@127.0.0.1:1/nowhere")
    with pytest.raises(StoreUnavailableError, match="cannot connect") as caught:
        await store.load("r")
    assert "s3cret" not in str(caught.value)
    await store.close()


# -- the run queue ------------------------------------------------------------------------------------

def _meta(run_id: str, workflow: str = "wf") -> RunMeta:
    return RunMeta(run_id=run_id, workflow=workflow, status="queued", created_at=1.0, updated_at=1.0, segments=0)


async def _queue(store: PostgresStore, run_id: str, *, queue: str = "default", priority: int = 0,
                 workflow: str = "wf") -> bool:
    genesis = JournalEntry(kind="decision", key="genesis", value={"workflow": workflow})
    run = QueuedRun(run_id=run_id, workflow=workflow, queue=queue, priority=priority)
    return await store.enqueue(run, _meta(run_id, workflow), genesis)


def _ask(worker: str = "w", *, queues: tuple[str, ...] = ("default",), limit: int = 10, ttl_s: float = 30,
         workflows: tuple[str, ...] = ("wf",), limits: dict[str, int] | None = None) -> ClaimRequest:
    return ClaimRequest(worker=worker, queues=list(queues), workflows=list(workflows), limit=limit, ttl_s=ttl_s,
                        limits=limits or {})


@pytest.fixture
async def pg(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    yield store
    await store.close()


async def test_enqueue_writes_genesis_meta_and_row_once(pg: PostgresStore) -> None:
    assert await _queue(pg, "r") is True
    assert await _queue(pg, "r") is False  # already queued: left as it is
    (genesis,) = await pg.load("r")
    assert genesis.seq == 1 and genesis.key == "genesis"
    meta = await pg.get_meta("r")
    assert meta is not None and meta.status == "queued"
    entry = await pg.queue_entry("r")
    assert entry is not None and (entry.state, entry.queue, entry.attempts) == ("queued", "default", 0)
    assert [m.run_id for m in await pg.list_runs(status="queued")] == ["r"]
    assert await pg.list_runs(status="running") == []


async def test_claims_go_by_priority_then_age(pg: PostgresStore) -> None:
    for run_id, priority in [("old-low", 0), ("high", 5), ("mid", 1), ("new-low", 0), ("negative", -3)]:
        await _queue(pg, run_id, priority=priority)
    first = await pg.claim(_ask(limit=2))
    rest = await pg.claim(_ask(limit=10))
    assert [c.run_id for c in first] == ["high", "mid"]
    assert [c.run_id for c in rest] == ["old-low", "new-low", "negative"]
    assert await pg.claim(_ask()) == []


async def test_concurrent_claimers_on_two_pools_take_each_run_exactly_once(pg_dsn: str, pg_schema: str) -> None:
    stores = [PostgresStore(pg_dsn, schema=pg_schema) for _ in range(2)]
    for i in range(30):
        await _queue(stores[0], f"r{i:02d}")

    async def claimer(store: PostgresStore, name: str) -> list[str]:
        got: list[str] = []
        while claims := await store.claim(_ask(name, limit=3)):
            got += [c.run_id for c in claims]
            await asyncio.sleep(0)
        return got

    results = await asyncio.gather(*(claimer(stores[i % 2], f"w{i}") for i in range(6)))
    claimed = [run_id for got in results for run_id in got]
    assert sorted(claimed) == [f"r{i:02d}" for i in range(30)]
    for s in stores:
        await s.close()


async def test_a_queue_cap_holds_across_claimers_until_a_run_finishes(pg_dsn: str, pg_schema: str) -> None:
    stores = [PostgresStore(pg_dsn, schema=pg_schema) for _ in range(3)]
    for i in range(6):
        await _queue(stores[0], f"slow-{i}", queue="slow")
        await _queue(stores[0], f"fast-{i}", queue="fast")
    asks = [_ask(f"w{i}", queues=("slow", "fast"), limit=3, limits={"slow": 2}) for i in range(3)]
    batches = await asyncio.gather(*(s.claim(a) for s, a in zip(stores, asks, strict=True)))
    claims = [c for batch in batches for c in batch]
    assert sum(c.queue == "slow" for c in claims) == 2  # the cap, cluster-wide
    assert sum(c.queue == "fast" for c in claims) == 6  # every fast run: that queue has no cap
    assert await stores[0].claim(asks[0]) == []  # slow is full, fast was drained
    slow = next(c for c in claims if c.queue == "slow")
    assert await stores[1].finish(slow, "done")
    (more,) = await stores[2].claim(asks[2])
    assert more.queue == "slow"
    for s in stores:
        await s.close()


async def test_a_lapsed_claim_without_a_live_lease_is_taken_over_and_the_old_claim_cannot_report(
    pg: PostgresStore,
) -> None:
    await _queue(pg, "r")
    (first,) = await pg.claim(_ask("dead", ttl_s=0.2))
    assert not first.takeover and first.attempts == 1
    assert await pg.claim(_ask("other")) == []  # the claim still protects it
    await asyncio.sleep(0.3)
    (second,) = await pg.claim(_ask("other"))
    assert second.run_id == "r" and second.takeover and second.attempts == 2 and second.claim_id > first.claim_id
    assert await pg.finish(first, "done") is False  # the stale claimer's report changes nothing
    entry = await pg.queue_entry("r")
    assert entry is not None and entry.state == "claimed" and entry.claimed_by == "other"
    assert await pg.finish(second, "done") is True


async def test_a_run_with_a_live_lease_is_never_claimed(pg: PostgresStore) -> None:
    await _queue(pg, "r")
    lease = await pg.acquire("r", owner("driver", host="elsewhere.invalid", pid=NO_SUCH_PID), 30)
    assert await pg.claim(_ask()) == []
    await pg.release(lease)
    assert [c.run_id for c in await pg.claim(_ask())] == ["r"]


async def test_claims_only_offer_workflows_the_worker_knows(pg: PostgresStore) -> None:
    await _queue(pg, "a", workflow="alpha")
    await _queue(pg, "b", workflow="beta")
    assert [c.run_id for c in await pg.claim(_ask(workflows=("beta",)))] == ["b"]
    assert [c.run_id for c in await pg.claim(_ask(workflows=("alpha", "beta")))] == ["a"]


async def test_handing_back_requeues_and_a_resolution_requeues_a_suspended_run(pg: PostgresStore) -> None:
    await _queue(pg, "r")
    (claim,) = await pg.claim(_ask())
    assert await pg.finish(claim, "queued")
    meta = await pg.get_meta("r")
    assert meta is not None and meta.status == "queued"
    (claim,) = await pg.claim(_ask())
    assert await pg.finish(claim, "suspended")
    assert await pg.claim(_ask()) == []  # parked: nothing to claim until it is resolved
    lease = await pg.acquire("r", owner("resolver"), 30)
    assert await pg.requeue(lease)
    assert await pg.claim(_ask()) == []  # claimable only once the resolver's lease is released
    await pg.release(lease)
    (again,) = await pg.claim(_ask())
    assert again.run_id == "r" and again.attempts == 3


async def test_a_requeue_under_a_stale_lease_is_rejected(pg: PostgresStore) -> None:
    await _queue(pg, "r")
    old = await pg.acquire("r", owner("old"), 30)
    await pg.release(old)
    await pg.acquire("r", owner("new"), 30)
    with pytest.raises(LeaseHeldError):
        await pg.requeue(old)


async def test_subscribers_are_woken_by_enqueue_and_settle(pg: PostgresStore) -> None:
    wakeups = await pg.subscribe([queue_topic("default"), settled_topic("r")])
    assert await wakeups.wait(0.05) is False
    await _queue(pg, "r")
    assert await wakeups.wait(5)
    wakeups.clear()
    meta = _meta("r").model_copy(update={"status": "ok"})
    await pg.put_meta(meta)
    assert await wakeups.wait(5)
    wakeups.close()


async def test_lease_times_come_from_the_database_clock(pg_dsn: str, pg_schema: str) -> None:
    import psycopg

    hour_ahead = PostgresStore(pg_dsn, schema=pg_schema, clock=lambda: time.time() + 3600)
    lease = await hour_ahead.acquire("r", owner("me"), 30)
    with psycopg.connect(pg_dsn) as conn:
        (db_now,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone() or (0.0,)
    assert abs(lease.expires_at - (float(db_now) + 30)) < 5  # not an hour out
    with pytest.raises(LeaseHeldError):
        await hour_ahead.acquire("r", owner("someone", host="elsewhere.invalid", pid=NO_SUCH_PID), 30)
    await hour_ahead.close()


def test_the_schema_can_come_from_the_url(pg_dsn: str) -> None:
    store = PostgresStore(f"{pg_dsn}?schema=mine&application_name=x")
    assert store.schema == "mine" and "schema" not in store.conninfo and "application_name=x" in store.conninfo
    assert PostgresStore(f"{pg_dsn}?schema=mine", schema="explicit").schema == "explicit"
    with pytest.raises(ConfigError):
        PostgresStore(f"{pg_dsn}?schema=bad-name")


async def test_a_schema_of_the_previous_layout_is_upgraded_in_place(pg_dsn: str, pg_schema: str) -> None:
    import psycopg

    old = PostgresStore(pg_dsn, schema=pg_schema)
    await old.append("r", entry("before"))
    await old.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 2: without this version's functions
        conn.execute(f'UPDATE "{pg_schema}".version SET v = 2')
        for signature in ("acquire(text, text, text, float8, bigint, text)", "renew(text, bigint, text, text)",
                          "finish(text, bigint, text, text, bigint)"):
            conn.execute(f'DROP FUNCTION "{pg_schema}".{signature}')
    new = PostgresStore(pg_dsn, schema=pg_schema)
    lease = await new.acquire("r", owner("me"), 30)
    assert [e.key for e in await new.load("r")] == ["before"]
    await new.renew(lease)
    await new.append("r", entry("after"), lease)
    await new.release(lease)
    assert [e.key for e in await new.load("r")] == ["before", "after"]
    await new.close()


async def test_a_refused_one_entry_append_is_told_why(pg_dsn: str, pg_schema: str) -> None:
    """A one-entry append (six parameters, its one-text answer read straight off the result) still names the head
    or the lease that refused it."""
    from tether.contracts.errors import JournalOrderViolation

    one = PostgresStore(pg_dsn, schema=pg_schema)
    two = PostgresStore(pg_dsn, schema=pg_schema)
    await one.append("r", entry("a"))
    await two.append("r", entry("b"))  # `one` still believes the head is 1
    assert await one.append_many("r", [entry("c")]) == [3]  # renumbered after 'head:2'
    with pytest.raises(JournalOrderViolation):  # an explicit seq that does not follow the head
        await one.append("r", entry("d").model_copy(update={"seq": 5}))
    dead = await one.acquire("r", owner("gone", pid=NO_SUCH_PID), 30)  # a holder whose process is gone
    with pytest.raises(LeaseHeldError):  # not its owner
        await one.append("r", entry("e"), dead.model_copy(update={"owner": owner("someone-else")}))
    lease = await two.acquire("r", owner("me"), 30)  # taken over: the dead holder's lease is stale
    with pytest.raises(LeaseHeldError):
        await one.append("r", entry("stale"), dead)
    await two.append("r", entry("f"), lease)
    assert [e.key for e in await one.load("r")] == ["a", "b", "c", "f"]
    await two.release(lease)
    await one.close()
    await two.close()
