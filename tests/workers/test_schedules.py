"""Schedules: exactly one run per cron tick, however many `tether worker` processes fire them."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from workerkit import requests, run_cli, spawn_worker, workers

import tether
from tether.contracts.schedules import Schedule
from tether.stores.postgres import PostgresStore
from tether.worker.schedules import due_ticks, next_tick, tick_run_id


@pytest.fixture
async def sched_client(store_url: str) -> AsyncIterator[tuple[tether.Engine, PostgresStore]]:
    import worker_app

    store = PostgresStore(store_url)
    engine = tether.Engine(store=store, workflows=[worker_app.ticked])
    yield engine, store
    await engine.close()


def test_missed_ticks_fire_the_last_minute_and_the_latest_older_one_only() -> None:
    every_minute = Schedule(name="m", workflow="w", cron="* * * * *", next_at=0.0)
    now = 86_400.0 * 10 + 30  # ten days of ticks missed
    assert due_ticks(every_minute, now) == [now - 30 - 60, now - 30]
    caught_up = Schedule(name="s", workflow="w", cron="* * * * * */10", next_at=now - 25)
    assert due_ticks(caught_up, now) == [now - 20, now - 10, now]
    assert due_ticks(Schedule(name="f", workflow="w", cron="* * * * *", next_at=now + 1), now) == []


async def test_a_bad_cron_or_a_store_without_schedules_is_a_config_error(
    sched_client: tuple[tether.Engine, PostgresStore], tmp_path: Path,
) -> None:
    engine, _ = sched_client
    with pytest.raises(tether.ConfigError, match="not a cron expression"):
        await engine.schedule("ticked", cron="every day")
    local = tether.Engine(store=f"sqlite:///{tmp_path / 'r.db'}", workflows=[engine.workflows["ticked"]])
    with pytest.raises(tether.ConfigError, match="PostgreSQL"):
        await local.schedule("ticked", cron="* * * * *")
    await local.close()


async def test_a_feb_31_cron_is_a_typed_config_error_and_nothing_is_stored(
    sched_client: tuple[tether.Engine, PostgresStore],
) -> None:
    engine, store = sched_client
    with pytest.raises(tether.ConfigError, match="never fires"):
        await engine.schedule("ticked", cron="0 0 31 2 *")
    with pytest.raises(tether.ConfigError, match="never fires"):
        next_tick("0 0 30 2 *", time.time())
    assert await store.schedule_list() == []


async def test_declaring_a_schedule_again_keeps_its_next_tick(sched_client: tuple[tether.Engine, PostgresStore]) -> None:
    engine, store = sched_client
    first = await engine.schedule("ticked", cron="*/5 * * * *", name="five")
    again = await engine.schedule("ticked", cron="*/5 * * * *", name="five", budget_usd=1.0)
    assert again.next_at == first.next_at and again.options == {"budget_usd": 1.0}
    assert first.next_at % 300 == 0 and first.next_at > await store.db_now()


@pytest.mark.timeout(90)
async def test_a_schedule_ticking_every_second_for_20_s_under_3_workers_yields_exactly_20_runs(
    sched_client: tuple[tether.Engine, PostgresStore], store_url: str, request_log: Path,
) -> None:
    engine, store = sched_client
    procs = [spawn_worker(store_url, request_log, queues=("ticks",), poll=0.5) for _ in range(3)]
    with workers(*procs):
        await engine.schedule("ticked", cron="* * * * * *", name="sec", queue="ticks")
        first = math.ceil(await store.db_now()) + 1
        window = [first + i for i in range(20)]
        await asyncio.sleep(max(0.0, window[-1] - time.time()) + 1.5)
        assert await store.schedule_remove("sec")
        ids = {tick_run_id("sec", t) for t in window}
        outcomes = {r: await engine.wait(r, timeout=30) for r in sorted(ids)}
        runs = [m for m in await engine.runs(limit=1000) if m.run_id.startswith("sched:sec:")]
    in_window = [m for m in runs if m.run_id in ids]
    calls = requests(request_log)
    fired_by = [sum("schedule sec: queued" in line for line in p.lines) for p in procs]
    print(f"\n20 ticks, 3 workers: {len(in_window)} runs in the window ({len(runs)} in all), "
          f"fires per worker {fired_by}")
    assert len(in_window) == 20
    assert all(o.status == "ok" for o in outcomes.values())
    assert all(m.segments == 1 for m in in_window)  # each driven once
    assert all(calls[("start", f"tick {r}")] == 1 for r in ids)  # each tick's model call paid once
    later = [m.run_id for m in runs if m.run_id not in ids and m.run_id > tick_run_id("sec", window[-1])]
    assert len(later) <= 2  # only the ticks between the window's end and the removal


def test_tether_schedule_add_list_remove(store_url: str) -> None:
    add = run_cli("schedule", "add", "nightly", "ticked", "--cron", "0 3 * * *", "--app", "worker_app:engine",
                  "--store", store_url, "--queue", "ticks", "--tenant-budget", "tenant:acme=5/day")
    assert add.returncode == 0, add.stderr
    assert "nightly" in add.stdout and "03:00" in add.stdout
    listed = run_cli("schedule", "list", "--app", "worker_app:engine", "--store", store_url)
    assert listed.returncode == 0, listed.stderr
    assert "nightly" in listed.stdout and "0 3 * * *" in listed.stdout and "tenant:acme" in listed.stdout
    removed = run_cli("schedule", "remove", "nightly", "--app", "worker_app:engine", "--store", store_url)
    assert removed.returncode == 0 and "removed" in removed.stdout
    missing = run_cli("schedule", "remove", "nightly", "--app", "worker_app:engine", "--store", store_url)
    assert missing.returncode != 0 and "no schedule 'nightly'" in missing.stderr
