"""`tether worker` processes sharing one PostgreSQL store: claims, takeover, partitions, skew, shutdown."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
import worker_app
from workerkit import PausableProxy, request_lines, requests, spawn_worker, wait_until, workers

import tether
from tether.contracts.entries import JournalEntry
from tether.journal.keys import SETTLE_KEY
from tether.stores.leases import current_owner
from tether.stores.postgres import PostgresStore

pytestmark = pytest.mark.timeout(180)


def settles(entries: list[JournalEntry]) -> list[str]:
    return [e.value["status"] for e in entries if e.key == SETTLE_KEY and isinstance(e.value, dict)]


def answers_by(entries: list[JournalEntry]) -> dict[str, str]:
    """prompt -> the journaled answer of each completed agent."""
    running = {e.seq: e for e in entries if e.kind == "agent" and e.status == "running"}
    out = {}
    for e in entries:
        if e.kind == "agent" and e.status == "ok" and e.ref in running and isinstance(e.value, dict):
            text = str(e.value["output"])
            out[text.rsplit(" by ", 1)[0]] = text
    return out


async def test_two_workers_complete_forty_runs_exactly_once_and_never_resend_a_completed_call(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    a = spawn_worker(store_url, request_log, concurrency=4)
    b = spawn_worker(store_url, request_log, concurrency=4)
    with workers(a, b):
        ids = [
            await client.enqueue(worker_app.chain, {"tag": f"r{i}", "n": 2}, run_id=f"run-{i:02d}", budget_usd=1.0)
            for i in range(40)
        ]
        outcomes = await asyncio.gather(*(client.wait(run_id, timeout=90) for run_id in ids))
    assert [o.status for o in outcomes] == ["ok"] * 40
    for i, o in enumerate(outcomes):
        assert [text.rsplit(" by ", 1)[0] for text in o.value] == [f"r{i} step 0", f"r{i} step 1"]
        assert o.cost.total_usd > 0
    store = await client.store()
    for run_id in ids:
        assert settles(await client.inspect(run_id)) == ["ok"]  # one segment settled it, once
        entry = await store.queue_entry(run_id)  # type: ignore[attr-defined]
        assert entry is not None and entry.state == "done"
    sent = requests(request_log)
    assert {k for k, n in sent.items() if n != 1} == set()  # no call sent twice, completed or not
    assert sum(n for (event, _), n in sent.items() if event == "done") == 80
    assert "claimed" in a.output and "claimed" in b.output  # both workers took a share


async def test_a_sigkilled_workers_run_is_finished_by_another_after_the_ttl_and_its_epoch_can_never_append(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    ttl = 2.0
    store = await client.store()
    assert isinstance(store, PostgresStore)
    a = spawn_worker(store_url, request_log, ttl=ttl, latency=0.4, concurrency=1)
    with workers(a):
        run_id = await client.enqueue(worker_app.chain, {"tag": "k", "n": 8}, run_id="killed")
        a.wait_for(f"run {run_id}: claimed")
        b = spawn_worker(store_url, request_log, ttl=ttl, latency=0.05, concurrency=1)
        with workers(b):
            seen = len(request_lines(request_log))
            await wait_until(lambda: len(request_lines(request_log)) > seen
                             and request_lines(request_log)[-1].event == "start", what="a call in flight")
            in_flight = request_lines(request_log)[-1].prompt
            dead = await store.lease_of(run_id)
            assert dead is not None and dead.owner.pid == a.proc.pid
            a.signal(signal.SIGKILL)
            assert a.proc.wait(10) == -signal.SIGKILL
            outcome = await client.wait(run_id, timeout=60)
            b.wait_for(f"run {run_id}: taken over")
    assert outcome.status == "ok"
    assert [v.rsplit(" by ", 1)[0] for v in outcome.value] == [f"k step {i}" for i in range(8)]
    # B resumed only once the dead worker's lease had expired (renewals could only have pushed the expiry
    # seen before the kill later), not at once: a lease is honoured until it expires.
    retry = next(r for r in request_lines(request_log) if r.prompt == in_flight and r.pid == b.proc.pid)
    assert retry.at >= dead.expires_at - 0.05
    sent = requests(request_log)
    assert all(sent[("done", p)] == 1 for _, p in sent)  # no completed call was sent again
    assert sent[("start", in_flight)] == 2  # only the call in flight at the kill went out twice
    assert settles(await client.inspect(run_id)) == ["ok"]
    before = await client.inspect(run_id)
    with pytest.raises(tether.LeaseHeldError):
        await store.append(run_id, JournalEntry(kind="step", key="zombie", status="ok"), dead)
    assert await client.inspect(run_id) == before


async def test_a_worker_cut_off_from_postgres_is_taken_over_and_its_late_writes_are_rejected(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    ttl = 3.0
    with PausableProxy("127.0.0.1", 5432) as proxy:
        a = spawn_worker(proxy.url(store_url), request_log, ttl=ttl, latency=0.2, concurrency=1)
        with workers(a):
            run_id = await client.enqueue(worker_app.chain, {"tag": "p", "n": 4}, run_id="partitioned")
            await wait_until(lambda: requests(request_log)[("start", "p step 1")] == 1, what="step 1 in flight")
            proxy.pause()
            # A's call completes inside A, but its terminal (and every renewal) is stuck in the cut link.
            await wait_until(lambda: requests(request_log)[("done", "p step 1")] == 1, what="A's step 1 reply")
            b = spawn_worker(store_url, request_log, ttl=ttl, latency=0.05, concurrency=1)
            with workers(b):
                outcome = await client.wait(run_id, timeout=60)
                b.wait_for(f"run {run_id}: taken over")
                journal = await client.inspect(run_id)
                assert not any(f"run {run_id}: stopped" in line for line in a.lines)  # still stuck in the cut
                proxy.resume()
                stopped = a.wait_for(f"run {run_id}: stopped", timeout=30)
                assert "lease lost" in stopped
                await asyncio.sleep(0.5)
                assert await client.inspect(run_id) == journal  # A's late writes never became visible
    assert outcome.status == "ok"
    answers = answers_by(journal)
    assert answers["p step 0"].endswith(f" by {a.proc.pid}")  # journaled before the cut
    assert answers["p step 1"].endswith(f" by {b.proc.pid}")  # A's copy was rejected, B's is the one kept
    sent = requests(request_log)
    assert sent[("done", "p step 1")] == 2  # A's answer never reached the journal, so B paid for it again
    assert all(sent[("done", f"p step {i}")] == 1 for i in (0, 2, 3))
    assert settles(journal) == ["ok"]


async def test_a_worker_an_hour_ahead_cannot_take_a_live_lease(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    store = await client.store()
    assert isinstance(store, PostgresStore)
    a = spawn_worker(store_url, request_log, ttl=3.0, latency=0.3, concurrency=1)
    with workers(a):
        run_id = await client.enqueue(worker_app.chain, {"tag": "s", "n": 12}, run_id="skewed")
        await wait_until(lambda: requests(request_log)[("start", "s step 1")] == 1, what="A driving")
        # The same store code with an hour-fast clock, in this process: the database's clock decides.
        skewed = PostgresStore(store_url, clock=lambda: time.time() + 3600)
        try:
            with pytest.raises(tether.LeaseHeldError, match="lease held"):
                await skewed.acquire(run_id, current_owner(), 3.0)
        finally:
            await skewed.close()
        # A whole worker process an hour ahead: libfaketime shifts every clock the process reads
        # (Python's time.time, asyncio's loop clock, psycopg's), not just the one tether is given.
        ahead = spawn_worker(store_url, request_log, ttl=3.0, latency=0.05, concurrency=2, faketime="+1h")
        with workers(ahead):
            outcome = await client.wait(run_id, timeout=60)
        ahead_clock = float(ahead.wait_for("worker_app clock ").rsplit(" ", 1)[1])
    assert ahead_clock - time.time() > 3000  # the shim really ran the worker an hour ahead
    assert outcome.status == "ok"
    assert f"run {run_id}" not in ahead.output  # the fast worker never claimed or took over the run
    assert all(v.endswith(f" by {a.proc.pid}") for v in outcome.value)
    sent = requests(request_log)
    assert {k for k, n in sent.items() if n != 1} == set()


async def test_sigterm_mid_run_hands_back_exits_zero_and_another_worker_finishes_with_zero_repays(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    ttl = 30.0  # a hand-back that did not release its lease would stall the run for 30 s
    a = spawn_worker(store_url, request_log, ttl=ttl, latency=0.3, concurrency=1)
    with workers(a):
        run_id = await client.enqueue(worker_app.chain, {"tag": "t", "n": 8}, run_id="handed-back")
        a.wait_for(f"run {run_id}: claimed")
        b = spawn_worker(store_url, request_log, ttl=ttl, latency=0.05, concurrency=1, poll=30.0)
        with workers(b):
            started = len(request_lines(request_log))
            await wait_until(lambda: len(request_lines(request_log)) > started
                             and request_lines(request_log)[-1].event == "start", what="a call in flight")
            in_flight = request_lines(request_log)[-1].prompt
            sent_at = time.monotonic()
            a.signal(signal.SIGTERM)
            assert a.proc.wait(15) == 0
            outcome = await client.wait(run_id, timeout=ttl / 2)
            took = time.monotonic() - sent_at
            line = b.wait_for(f"run {run_id}: ok")
    assert "handed back" in a.output
    assert outcome.status == "ok" and took < ttl / 2
    paid_by_a = [r.prompt for r in request_lines(request_log) if r.event == "done" and r.pid == a.proc.pid]
    assert f"replayed {len(paid_by_a)}" in line  # everything A completed came from the journal
    sent = requests(request_log)
    assert all(sent[("done", p)] == 1 for _, p in sent)  # zero re-pays
    assert sent[("start", in_flight)] == 2  # only the call cut by the hand-back went out again
    journal = await client.inspect(run_id)
    assert settles(journal) == ["ok"]  # handing back settled nothing
    cut = [e for e in journal if e.kind == "agent" and e.status == "cancelled"]
    assert len(cut) == 1  # the cut call journaled its terminal (its partial spend counts once)


async def test_an_idle_worker_starts_a_queued_run_within_100_ms(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    w = spawn_worker(store_url, request_log, poll=30.0)  # polling cannot be what starts these runs
    with workers(w):
        await asyncio.sleep(0.5)
        delays = []
        for i in range(7):
            enqueued = time.time()
            run_id = await client.enqueue(worker_app.stamp, run_id=f"stamp-{i}")
            outcome = await client.wait(run_id, timeout=10)
            delays.append(outcome.value - enqueued)
            await asyncio.sleep(0.2)
    assert sorted(delays)[len(delays) // 2] < 0.1, delays
