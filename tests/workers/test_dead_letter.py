"""Dead-lettering: a run whose workers keep dying is settled `error` after N lapsed attempts and listed `dead`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest
import worker_app
from workerkit import WorkerProcess, request_lines, requests, run_cli, spawn_worker, wait_until, workers

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.queue import Claim, ClaimRequest
from tether.journal.keys import SETTLE_KEY
from tether.stores.leases import local_host
from tether.stores.postgres import PostgresStore
from tether.worker import Worker

pytestmark = pytest.mark.timeout(180)


def settles(entries: list[JournalEntry]) -> list[str]:
    return [e.value["status"] for e in entries if e.key == SETTLE_KEY and isinstance(e.value, dict)]


async def postgres(client: tether.Engine) -> PostgresStore:
    store = await client.store()
    assert isinstance(store, PostgresStore)
    return store


async def test_a_run_that_kills_its_worker_is_dead_lettered_after_exactly_n_attempts_and_other_runs_still_finish(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    ttl, cap = 2.0, 3
    store = await postgres(client)
    doomed = await client.enqueue(worker_app.crasher, {"tag": "doom"}, run_id="doomed", priority=10)
    others = [await client.enqueue(worker_app.chain, {"tag": f"o{i}", "n": 1}, run_id=f"other-{i}") for i in range(4)]
    spawned: list[WorkerProcess] = []

    def spawn() -> WorkerProcess:
        spawned.append(spawn_worker(store_url, request_log, ttl=ttl, concurrency=1, extra=("--max-attempts", str(cap))))
        return spawned[-1]

    async def is_dead() -> bool:
        meta = await store.get_meta(doomed)
        return meta is not None and meta.status == "dead"

    try:
        current = spawn()
        deadline = time.monotonic() + 90
        while not await is_dead():  # a supervisor: whenever the worker dies, start another
            assert time.monotonic() < deadline, "the run was never dead-lettered"
            if current.proc.poll() is not None:
                current = spawn()
            await asyncio.sleep(0.05)
        outcome = await client.wait(doomed, timeout=30)
        finished = await asyncio.gather(*(client.wait(run_id, timeout=60) for run_id in others))
        survivor = spawned[-1]
        line = survivor.wait_for(f"run {doomed}: dead-lettered")
        assert survivor.proc.poll() is None  # the worker that dead-lettered it did not run the body, so it lives
    finally:
        with workers(*spawned):
            pass
    killed = spawned[:-1]
    assert len(killed) == cap and all(w.proc.returncode == -signal.SIGKILL for w in killed)
    sent = requests(request_log)
    assert sent[("crash", "doom")] == cap  # exactly N attempts ran the body, each ending in a real process death
    assert sent[("done", "doom before the crash")] == 1  # the later attempts replayed the paid call from the journal
    assert outcome.status == "error" and outcome.error is not None
    message = outcome.error["message"]
    assert f"{cap} attempts in a row" in message and f"the cap is {cap}" in message
    assert "tether resume doomed" in message and "enqueue it again" in message
    assert outcome.error["workers"] == [f"{local_host()}:{w.proc.pid}" for w in killed]  # who died, in order
    assert line.endswith(message)
    assert [o.status for o in finished] == ["ok"] * len(others)
    assert [m.run_id for m in await client.runs(status="dead")] == [doomed]
    entry = await store.queue_entry(doomed)
    assert entry is not None and entry.state == "dead" and entry.error == message
    assert settles(await client.inspect(doomed)) == ["error"]

    listed = run_cli("runs", "--status", "dead", "--store", store_url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["run_id"], r["status"]) for r in json.loads(listed.stdout)] == [(doomed, "dead")]
    # What the message says to do: fix the crash, then resume it. The paid call still replays.
    resumed = run_cli("resume", doomed, "--app", "worker_app:engine", "--store", store_url, "--json",
                      env_extra={"WORKER_FIXED": "1", "WORKER_STORE": store_url, "WORKER_LOG": str(request_log)})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = await client.wait(doomed, timeout=10)
    assert again.status == "ok" and again.value.startswith("doom before the crash by ")
    assert requests(request_log)[("start", "doom before the crash")] == 1
    assert settles(await client.inspect(doomed)) == ["error", "ok"]


async def test_only_claims_that_lapse_in_a_row_are_counted_and_a_reported_claim_ends_the_streak(
    client: tether.Engine,
) -> None:
    store = await postgres(client)
    await client.enqueue(worker_app.chain, {"tag": "s"}, run_id="streak")

    async def claim(worker: str) -> Claim:
        await asyncio.sleep(0.3)  # the previous claim (if any) lapses unreported: its worker "died"
        request = ClaimRequest(worker=worker, queues=["default"], workflows=["chain"], limit=1, ttl_s=0.2)
        (got,) = await store.claim(request)
        return got

    def seen(c: Claim) -> tuple[bool, int, list[str]]:
        return c.takeover, c.lapsed, c.lapsed_by

    assert seen(await claim("w-1")) == (False, 0, [])
    assert seen(await claim("w-2")) == (True, 1, ["w-1"])
    assert seen(await claim("w-3")) == (True, 2, ["w-1", "w-2"])
    fourth = await claim("w-4")
    assert seen(fourth) == (True, 3, ["w-1", "w-2", "w-3"])
    assert await store.finish(fourth, "queued")  # w-4 reported its claim (a hand-back): the streak is over
    assert seen(await claim("w-5")) == (False, 0, [])
    assert seen(await claim("w-6")) == (True, 1, ["w-5"])  # a new streak starts from one
    entry = await store.queue_entry("streak")
    assert entry is not None and entry.attempts == 6  # every claim still counts as an attempt


async def test_a_worker_dead_letters_a_run_whose_claims_lapsed_n_times_without_running_it_and_enqueue_revives_it(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    store = await postgres(client)
    await client.enqueue(worker_app.chain, {"tag": "r", "n": 1}, run_id="revived")
    for worker in ("gone-1", "gone-2"):  # two workers claim it and die without reporting
        await store.claim(ClaimRequest(worker=worker, queues=["default"], workflows=["chain"], limit=1, ttl_s=0.2))
        await asyncio.sleep(0.3)
    os.environ["WORKER_LOG"] = worker_app.LOG = str(request_log)
    engine = tether.Engine(models=[worker_app.LoggedModel()], routing={"loop": "fake:m"}, store=store_url,
                           workflows=[worker_app.chain])
    lines: list[str] = []
    worker = Worker(engine, max_attempts=2, poll_s=0.1, log=lines.append)
    assert worker.health(await postgres(engine)).endswith("max attempts 2")
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        dead = await client.wait("revived", timeout=30)
        assert dead.status == "error" and "2 attempts in a row" in dead.error["message"]
        assert dead.error["workers"] == ["gone-1", "gone-2"]
        assert request_lines(request_log) == []  # the body never ran: nothing was sent to the model
        assert [m.status for m in await client.runs(status="dead")] == ["dead"]
        entry = await store.queue_entry("revived")
        assert entry is not None and entry.state == "dead"  # reported before the run was listed dead
        assert await client.enqueue(worker_app.chain, None, run_id="revived") == "revived"
        revived = await client.wait("revived", timeout=30)
    finally:
        stop.set()
        await task
        await engine.close()
    assert revived.status == "ok" and revived.value == [f"r step 0 by {os.getpid()}"]
    assert (worker.stats.dead, worker.stats.settled) == (1, 1)
    assert settles(await client.inspect("revived")) == ["error", "ok"]
    entry = await store.queue_entry("revived")
    assert entry is not None and entry.state == "done"
    assert any("revived: dead-lettered: 2 attempts" in line for line in lines)


async def test_a_run_that_settled_before_its_claims_lapsed_is_reported_as_it_settled_never_dead_lettered(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    store = await postgres(client)
    await client.enqueue(worker_app.chain, {"tag": "late", "n": 1}, run_id="settled-late")
    os.environ["WORKER_LOG"] = worker_app.LOG = str(request_log)
    engine = tether.Engine(models=[worker_app.LoggedModel()], routing={"loop": "fake:m"}, store=store_url,
                           workflows=[worker_app.chain])
    for worker in ("gone-1", "gone-2"):
        await store.claim(ClaimRequest(worker=worker, queues=["default"], workflows=["chain"], limit=1, ttl_s=0.2))
        if worker == "gone-2":  # this one settled the run, then died before it could report its claim
            assert (await engine.resume("settled-late")).status == "ok"
        await asyncio.sleep(0.3)
    lines: list[str] = []
    worker = Worker(engine, max_attempts=2, poll_s=0.1, log=lines.append)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await wait_until(lambda: worker.stats.claimed == 1, what="the worker's claim")
        for _ in range(100):
            entry = await store.queue_entry("settled-late")
            if entry is not None and entry.state != "claimed":
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
        await engine.close()
    assert entry is not None and entry.state == "done"
    assert worker.stats.dead == 0
    assert "run settled-late: had settled before its worker could report it; reported done" in lines
    assert (await client.run_meta("settled-late")).status == "ok"
    assert settles(await client.inspect("settled-late")) == ["ok"]
    assert requests(request_log)[("start", "late step 0")] == 1


def test_max_attempts_must_be_at_least_one(store_url: str) -> None:
    engine = tether.Engine(store=store_url, workflows=[worker_app.chain])
    for bad in (0, -1, True, 2.5):
        with pytest.raises(tether.ConfigError, match="max_attempts"):
            Worker(engine, max_attempts=bad)  # type: ignore[arg-type]
    refused = run_cli("worker", "--app", "worker_app:engine", "--store", store_url, "--max-attempts", "0")
    assert refused.returncode != 0 and "max-attempts" in refused.stderr
