"""Round trips to PostgreSQL, counted at a TCP proxy: group commits, lease reads, finishes, whole runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import worker_app
from workerkit import PausableProxy, wait_until

import tether
from tether.contracts.entries import JournalEntry, RunMeta
from tether.contracts.errors import JournalOrderViolation, LeaseHeldError
from tether.contracts.queue import ClaimRequest, Finished, QueuedRun
from tether.engine.lease import cancel_request_key
from tether.stores.codec import number_entries
from tether.stores.postgres import PostgresStore
from tether.testing import Reply
from tether.testing.store_kit import NO_SUCH_PID, entry, owner
from tether.worker import Worker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def proxy() -> Iterator[PausableProxy]:
    with PausableProxy("127.0.0.1", 5432) as p:
        yield p


@pytest.fixture
async def counted(proxy: PausableProxy, store_url: str) -> AsyncIterator[PostgresStore]:
    """A store whose every round trip passes the proxy, on one connection (its statements prepared once)."""
    store = PostgresStore(proxy.url(store_url), max_size=1)
    yield store
    await store.close()


class Count:
    """Round trips through the proxy from `with` to its end."""

    def __init__(self, proxy: PausableProxy) -> None:
        self.proxy = proxy
        self.used = 0

    def __enter__(self) -> Count:
        self._start = self.proxy.round_trips
        return self

    def __exit__(self, *exc: object) -> None:
        self.used = self.proxy.round_trips - self._start


def _rows(run_id: str, after: int, n: int) -> list[tuple[int, str]]:
    return number_entries(run_id, after, [entry(f"k{after + i}") for i in range(n)])


def _meta(run_id: str) -> RunMeta:
    return RunMeta(run_id=run_id, workflow="wf", status="running", created_at=1.0, updated_at=1.0, segments=1)


async def _warm(store: PostgresStore) -> None:
    """Prepare the append, acquire and read statements on the store's connection (one extra round trip each)."""
    await store.load("warm")
    lease = await store.acquire("warm", owner("warm"), 30)
    await store.append_rows("warm", _rows("warm", 0, 1), lease)
    await store.append_rows("warm", _rows("warm", 1, 2), lease)
    await store.release(lease)


async def test_a_group_commit_is_one_round_trip_whatever_it_holds(proxy: PausableProxy, counted: PostgresStore) -> None:
    await _warm(counted)
    lease = await counted.acquire("r", owner("me"), 30)
    assert await counted.load("r") == []
    with Count(proxy) as one:
        assert await counted.append_rows("r", _rows("r", 0, 1), lease) == [1]
    with Count(proxy) as five:
        assert await counted.append_rows("r", _rows("r", 1, 5), lease) == [2, 3, 4, 5, 6]
    assert (one.used, five.used) == (1, 1)
    loaded = await counted.load("r")
    assert [e.seq for e in loaded] == [1, 2, 3, 4, 5, 6] and loaded[5].key == "k5"


async def test_rows_that_do_not_continue_the_head_are_refused_in_the_same_round_trip(
    proxy: PausableProxy, counted: PostgresStore, store_url: str
) -> None:
    await _warm(counted)
    lease = await counted.acquire("r", owner("gone", pid=NO_SUCH_PID), 30)  # a holder that can be taken over
    await counted.append_rows("r", _rows("r", 0, 2), lease)
    with Count(proxy) as refused, pytest.raises(JournalOrderViolation, match="expects seq 3"):
        await counted.append_rows("r", _rows("r", 1, 2), lease)  # seq 2 again: a writer whose view is stale
    assert refused.used == 1
    with pytest.raises(JournalOrderViolation):
        await counted.append_rows("r", [(3, _rows("r", 2, 1)[0][1]), (5, _rows("r", 4, 1)[0][1])], lease)  # a gap
    other = PostgresStore(store_url)
    newer = await other.acquire("r", owner("newer"), 30)
    with Count(proxy) as fenced, pytest.raises(LeaseHeldError):
        await counted.append_rows("r", _rows("r", 2, 1), lease)  # the old epoch
    assert fenced.used == 1
    assert [e.seq for e in await other.load("r")] == [1, 2]  # nothing refused became visible
    assert await other.append_rows("r", _rows("r", 2, 1), newer) == [3]
    await other.close()


async def test_taking_a_lease_reads_what_its_holder_reads_next_in_the_same_round_trip(
    proxy: PausableProxy, counted: PostgresStore, store_url: str
) -> None:
    await _warm(counted)
    writer = PostgresStore(store_url)
    await writer.append_many("r", [entry("a"), entry("b")])
    await writer.put_meta(_meta("r"))
    await writer.put_blob(cancel_request_key("r"), b'{"reason": "stop"}')
    await counted.get_meta("r")
    await counted.get_blob("x")  # prepared: these reads are counted below only if they go to the database
    with Count(proxy) as taking:
        lease = await counted.acquire("r", owner("me"), 30)
        assert await counted.get_blob(cancel_request_key("r")) == b'{"reason": "stop"}'
        assert [e.key for e in await counted.load("r")] == ["a", "b"]
        meta = await counted.get_meta("r")
    assert taking.used == 1
    assert meta is not None and meta.status == "running"
    with Count(proxy) as again:  # served once: the next reads go to the database
        assert len(await counted.load("r")) == 2
    assert again.used == 1
    await counted.append_rows("r", _rows("r", 2, 1), lease)
    lease = await counted.acquire("r", owner("me"), 30)
    await counted.append_rows("r", _rows("r", 3, 1), lease)  # this store's own write after the acquire
    assert [e.seq for e in await counted.load("r")] == [1, 2, 3, 4]  # is never hidden by what it prefetched
    await writer.close()


async def test_a_renewal_reads_the_cancel_request_in_the_same_round_trip(
    proxy: PausableProxy, counted: PostgresStore, store_url: str
) -> None:
    await _warm(counted)
    lease = await counted.acquire("r", owner("me"), 30)
    assert await counted.get_blob(cancel_request_key("r")) is None
    await counted.renew(lease)  # prepared
    await counted.get_blob(cancel_request_key("r"))
    other = PostgresStore(store_url)
    await other.put_blob(cancel_request_key("r"), b"please")
    with Count(proxy) as renewing:
        lease = await counted.renew(lease)
        assert await counted.get_blob(cancel_request_key("r")) == b"please"
    assert renewing.used == 1
    await other.close()


async def test_a_claimed_runs_release_rides_with_its_finish(
    proxy: PausableProxy, counted: PostgresStore, store_url: str
) -> None:
    await _warm(counted)
    genesis = JournalEntry(kind="decision", key="genesis", value={"workflow": "wf"})
    ask = ClaimRequest(worker="w", queues=["default"], workflows=["wf"], limit=1, ttl_s=30)
    other = PostgresStore(store_url)
    for run_id in ("a", "b"):
        await other.enqueue(QueuedRun(run_id=run_id, workflow="wf"), _meta(run_id), genesis)
    (claim,) = await counted.claim(ask)
    await counted.release(await counted.acquire(claim.run_id, owner("driver"), 30))
    (claim,) = await counted.claim(ask.model_copy(update={"finished": [Finished(claim=claim, state="queued")]}))
    lease = await counted.acquire(claim.run_id, owner("driver"), 30)
    with Count(proxy) as letting_go:
        await counted.release(lease)
        assert await other.lease_of("a") is not None  # not yet: the finish carries it
        (claimed,) = await counted.claim(ask.model_copy(update={"finished": [Finished(claim=claim, state="queued")]}))
    assert letting_go.used == 1
    assert claimed.run_id == "a"  # handed back and released in one transaction: claimable at once
    lease = await counted.acquire("a", owner("driver"), 30)
    await counted.release(lease)
    assert await counted.lease_of("a") is None  # asking this store sends what it was holding back
    assert await counted.finish(claimed, "done")
    entry_a = await other.queue_entry("a")
    assert entry_a is not None and entry_a.state == "done"
    await other.close()


@tether.workflow(name="one_turn")
async def one_turn(ctx: tether.Ctx) -> str:
    return await ctx.agent("hello")


async def test_a_one_turn_agent_commits_its_journal_twice(proxy: PausableProxy, store_url: str) -> None:
    """Genesis, dispatch (with the staged running entry), reply, settle: four journal round trips."""
    store = PostgresStore(proxy.url(store_url), max_size=1)
    model = tether.models.fake("fake", script=lambda _: Reply(text="hi"))
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store, workflows=[one_turn])
    await engine.run(one_turn, {}, run_id="warm")
    appends: list[int] = []
    send = store._send_append

    async def counting(*args: object, **kwargs: object) -> int | None:
        appends.append(1)
        return await send(*args, **kwargs)  # type: ignore[arg-type]

    store._send_append = counting  # type: ignore[method-assign]
    with Count(proxy) as run:
        outcome = await engine.run(one_turn, {}, run_id="counted")
    await engine.close()
    assert outcome.status == "ok" and outcome.value == "hi"
    assert len(appends) <= 4  # the agent itself: two commits
    # the lease (with the journal, meta and cancel reads), four appends, two meta writes, the orphan check
    # at settle and the release
    assert run.used <= 9, run.used


async def test_a_queued_run_of_two_agents_costs_ten_round_trips(
    proxy: PausableProxy, store_url: str, request_log: Path, client: tether.Engine
) -> None:
    runs = 6
    for i in range(runs + 1):
        await client.enqueue(worker_app.chain, {"tag": f"r{i}"}, run_id=f"r{i}")
    worker_app.LOG = str(request_log)
    engine = tether.Engine(
        models=[worker_app.LoggedModel()], routing={"loop": "fake:m"},
        store=PostgresStore(proxy.url(store_url), max_size=1), workflows=[worker_app.chain],
    )
    stop = asyncio.Event()
    worker = Worker(engine, concurrency=1, poll_s=30, log=lambda _: None)
    task = asyncio.create_task(worker.run(stop))
    try:
        await wait_until(lambda: worker.stats.settled >= 1, what="the first run")  # it prepares the statements
        with Count(proxy) as driving:
            await wait_until(lambda: worker.stats.settled >= runs + 1, what="every run")
    finally:
        stop.set()
        await task
        await engine.close()
    # claim (with the last run's finish and lease release), the lease (with the journal, meta and cancel
    # reads), the running meta, two commits per agent, the settle, the settled meta, the orphan check
    assert driving.used <= runs * 10 + 2, driving.used
