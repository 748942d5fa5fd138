"""`tether worker` options against real PostgreSQL: which store it uses, the polling fallback, `--grace`."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import psycopg
import pytest
import worker_app
from workerkit import request_lines, requests, spawn_worker, wait_until, workers

import tether
from tether.contracts.entries import JournalEntry
from tether.journal.keys import SETTLE_KEY

pytestmark = pytest.mark.timeout(180)


def settles(entries: list[JournalEntry]) -> list[str]:
    return [e.value["status"] for e in entries if e.key == SETTLE_KEY and isinstance(e.value, dict)]


def schema_exists(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is not None


async def test_tether_store_is_the_store_of_a_worker_whose_app_engine_names_none(
    client: tether.Engine, store_url: str, pg_schema: str, request_log: Path
) -> None:
    w = spawn_worker("", request_log, tether_store=store_url)  # worker_app's engine names no store
    with workers(w):
        health = w.wait_for(" ready: ")
        assert f"(schema {pg_schema})" in health, health
        run_id = await client.enqueue(worker_app.chain, {"tag": "env", "n": 1}, run_id="env-store")
        outcome = await client.wait(run_id, timeout=60)
    assert outcome.status == "ok" and outcome.value == [f"env step 0 by {w.proc.pid}"]


async def test_tether_store_never_overrides_the_store_a_worker_apps_engine_names(
    client: tether.Engine, store_url: str, pg_dsn: str, pg_schema: str, request_log: Path
) -> None:
    decoy = f"{pg_schema}_env"
    try:
        w = spawn_worker(store_url, request_log, tether_store=f"{pg_dsn}?schema={decoy}")
        with workers(w):
            health = w.wait_for(" ready: ")
            assert f"(schema {pg_schema})" in health and decoy not in health, health
            run_id = await client.enqueue(worker_app.chain, {"tag": "named", "n": 1}, run_id="named-store")
            outcome = await client.wait(run_id, timeout=60)
        assert outcome.status == "ok" and outcome.value == [f"named step 0 by {w.proc.pid}"]
        assert not schema_exists(pg_dsn, decoy)  # the worker never even connected there
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{decoy}" CASCADE')


async def move_to_default(pg_dsn: str, schema: str, run_id: str) -> float:
    """Move a queued run into the `default` queue with a plain UPDATE: a real write that sends no NOTIFY."""
    def update() -> float:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            triggers = conn.execute(
                "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                (f'"{schema}".queue',),
            ).fetchone()
            assert triggers == (0,)  # nothing on the table turns the UPDATE into a notification
            moved = conn.execute(f'UPDATE "{schema}".queue SET queue = %s WHERE run_id = %s AND state = %s',
                                 ("default", run_id, "queued"))
            assert moved.rowcount == 1
            return time.time()

    return await asyncio.to_thread(update)


async def queue_state(client: tether.Engine, run_id: str) -> str | None:
    entry = await (await client.store()).queue_entry(run_id)  # type: ignore[attr-defined]
    return None if entry is None else str(entry.state)


async def until_idle(client: tether.Engine, run_id: str) -> None:
    """Until the worker has reported `run_id` done: that claim round trip was its last before it idles."""
    deadline = time.monotonic() + 30
    while await queue_state(client, run_id) != "done":
        assert time.monotonic() < deadline, f"{run_id} was never reported done"
        await asyncio.sleep(0.05)


async def test_a_run_queued_without_a_notification_is_started_by_the_poll(
    client: tether.Engine, store_url: str, pg_dsn: str, pg_schema: str, request_log: Path
) -> None:
    # Control: a worker that polls every 30 s, idle, is not woken by this path (no NOTIFY reaches it).
    deaf = spawn_worker(store_url, request_log, poll=30.0)
    with workers(deaf):
        await client.wait(await client.enqueue(worker_app.stamp, run_id="announced"), timeout=30)
        await until_idle(client, "announced")  # its claims are done: only a wake-up or the poll claims again
        await client.enqueue(worker_app.stamp, run_id="unannounced-1", queue="parked")  # notifies `parked` only
        await move_to_default(pg_dsn, pg_schema, "unannounced-1")
        await asyncio.sleep(2.0)
        assert await queue_state(client, "unannounced-1") == "queued"  # still waiting for the next poll
    assert "unannounced-1" not in deaf.output

    poll = 1.0
    w = spawn_worker(store_url, request_log, poll=poll)
    with workers(w):
        first = await client.wait("unannounced-1", timeout=30)  # claimed by the new worker's first claim
        await until_idle(client, "unannounced-1")
        await client.enqueue(worker_app.stamp, run_id="unannounced-2", queue="parked")
        moved_at = await move_to_default(pg_dsn, pg_schema, "unannounced-2")
        second = await client.wait("unannounced-2", timeout=30)
        w.wait_for("run unannounced-2: ok")
    assert first.status == "ok" and second.status == "ok"
    assert "run unannounced-2: claimed" in w.output
    # Started by the poll: within one poll interval of the move, plus a second for the claim's round
    # trip and the run's start on a busy machine.
    assert second.value - moved_at < poll + 1.0, second.value - moved_at


async def test_grace_lets_the_run_finish_on_sigterm_exit_zero_settled_by_that_worker_zero_repays(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    w = spawn_worker(store_url, request_log, latency=0.3, concurrency=1, extra=("--grace", "60"))
    with workers(w):
        run_id = await client.enqueue(worker_app.chain, {"tag": "g", "n": 4}, run_id="graceful")
        w.wait_for(f"run {run_id}: claimed")
        await wait_until(lambda: any(r.event == "start" for r in request_lines(request_log)), what="a call in flight")
        w.signal(signal.SIGTERM)
        assert w.proc.wait(60) == 0
    out = w.output
    assert "may finish within 60 s" in out and f"run {run_id}: ok" in out
    assert "handed back" not in out and "handing back" not in out
    outcome = await client.wait(run_id, timeout=10)
    assert outcome.status == "ok"
    assert outcome.value == [f"g step {i} by {w.proc.pid}" for i in range(4)]  # every call paid by that worker
    sent = requests(request_log)
    assert sorted(sent.values()) == [1] * 8  # 4 starts and 4 completions, none sent twice: zero re-pays
    journal = await client.inspect(run_id)
    assert settles(journal) == ["ok"]
    assert not [e for e in journal if e.kind == "agent" and e.status == "cancelled"]  # nothing was cut
    entry = await (await client.store()).queue_entry(run_id)  # type: ignore[attr-defined]
    assert entry is not None and entry.state == "done" and entry.claimed_by is not None
    assert entry.claimed_by.endswith(f":{w.proc.pid}")  # settled under that worker's claim
