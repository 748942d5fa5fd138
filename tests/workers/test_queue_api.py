"""The queue through the public API and the CLI: enqueue, wait, runs --status, resolve re-queues, hand back."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import worker_app
from workerkit import HERE, SRC, PausableProxy, request_lines, requests, spawn_worker, wait_until, workers

import tether
from tether.journal.keys import GENESIS_KEY, SETTLE_KEY
from tether.stores.postgres import PostgresStore
from tether.testing import Reply
from tether.worker import Worker

pytestmark = pytest.mark.timeout(120)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{HERE}"}
    env.pop("TETHER_STORE", None)
    return subprocess.run(
        [sys.executable, "-c", "from tether.cli.main import main; main()", *args],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
    )


def app_engine(store_url: str, log: Path, **options: Any) -> tether.Engine:
    """An engine like the worker app's, in this process (for an in-process `Worker`)."""
    os.environ["WORKER_LOG"] = str(log)
    worker_app.LOG = str(log)
    return tether.Engine(
        models=[worker_app.LoggedModel()], routing={"loop": "fake:m"}, store=store_url,
        workflows=[worker_app.chain, worker_app.approval, worker_app.stamp], **options,
    )


async def test_enqueue_needs_a_store_with_a_queue(tmp_path: Path) -> None:
    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db")
    with pytest.raises(tether.ConfigError, match="postgresql://"):
        await engine.enqueue(worker_app.chain, {"tag": "x"})
    with pytest.raises(tether.ConfigError, match="postgresql://"):
        await Worker(engine).run()
    await engine.close()


async def test_enqueue_refuses_what_it_cannot_honour(client: tether.Engine) -> None:
    with pytest.raises(TypeError, match="budget"):  # a misspelled option: explicit keywords (and mypy) refuse it
        await client.enqueue(worker_app.chain, {"tag": "x"}, budget=1.0)  # type: ignore[call-arg]
    with pytest.raises(tether.ConfigError, match="queue"):
        await client.enqueue(worker_app.chain, {"tag": "x"}, queue="")
    with pytest.raises(tether.ConfigError, match="priority"):
        await client.enqueue(worker_app.chain, {"tag": "x"}, priority=1.5)  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigError, match="budget_usd"):
        await client.enqueue(worker_app.chain, {"tag": "x"}, budget_usd=-1)
    with pytest.raises(tether.NonSerializableValueError):
        await client.enqueue(worker_app.chain, {"tag": object()})
    assert await client.runs() == []  # nothing was written


async def test_enqueue_writes_the_run_whole_with_its_durable_options(client: tether.Engine) -> None:
    run_id = await client.enqueue(
        worker_app.chain, {"tag": "q", "n": 1}, run_id="whole", budget_usd=0.5, queue="slow", priority=3,
        strict_pricing=True, max_in_flight_exposure_usd=0.2, containment=tether.Containment(max_agents=10, max_concurrent=4, max_depth=2),
        deadline_s=30,
    )
    assert run_id == "whole"
    (genesis,) = await client.inspect(run_id)
    assert genesis.key == GENESIS_KEY and genesis.value["workflow"] == "chain"
    assert genesis.value["budget_usd"] == 0.5 and genesis.value["strict_pricing"] is True
    assert genesis.value["max_in_flight_exposure_usd"] == 0.2 and genesis.value["containment"]["max_depth"] == 2
    (meta,) = await client.runs(status="queued")
    assert (meta.run_id, meta.status, meta.budget_usd, meta.args) == ("whole", "queued", 0.5, {"tag": "q", "n": 1})
    assert await client.runs(status="running") == []
    store = await client.store()
    assert isinstance(store, PostgresStore)
    entry = await store.queue_entry(run_id)
    assert entry is not None and (entry.queue, entry.priority, entry.state) == ("slow", 3, "queued")
    assert await client.enqueue(worker_app.chain, {"tag": "q", "n": 1}, run_id="whole") == "whole"  # idempotent
    assert len(await client.inspect(run_id)) == 1
    with pytest.raises(tether.ConfigError, match="budget_usd"):  # a run's fixed options stay fixed
        await client.enqueue(worker_app.chain, {"tag": "q", "n": 1}, run_id="whole", budget_usd=9.0)
    automatic = await client.enqueue(worker_app.chain, {"tag": "q"})
    assert len(automatic) == 26  # a ULID


async def test_the_options_fixed_at_enqueue_bind_the_worker_that_drives_the_run(
    store_url: str, request_log: Path, client: tether.Engine
) -> None:
    broke = await client.enqueue(worker_app.chain, {"tag": "cheap", "n": 5}, run_id="broke", budget_usd=0.000001)
    engine = app_engine(store_url, request_log)
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(engine, concurrency=2, poll_s=0.1, log=lambda _: None).run(stop))
    try:
        outcome = await client.wait(broke, timeout=30)
    finally:
        stop.set()
        await task
        await engine.close()
    assert outcome.status == "exhausted"
    assert outcome.cost.total_usd <= 0.000001 + 0.001
    assert requests(request_log)[("done", "cheap step 4")] == 0


async def test_wait_times_out_on_an_unclaimed_run_and_refuses_an_unknown_one(client: tether.Engine) -> None:
    run_id = await client.enqueue(worker_app.chain, {"tag": "idle"})
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="queued"):
        await client.wait(run_id, timeout=0.3)
    assert time.monotonic() - started < 5
    with pytest.raises(tether.RunNotFoundError):
        await client.wait("no-such-run", timeout=1)


async def test_runs_filter_by_status_on_a_store_without_a_queue(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=[Reply(text="a"), Reply(text="b")])
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           workflows=[worker_app.chain, worker_app.approval])
    await engine.run(worker_app.chain, {"tag": "x", "n": 1}, run_id="done")
    parked = await engine.run(worker_app.approval, {"tag": "y"}, run_id="parked")
    assert parked.status == "suspended"
    assert [m.run_id for m in await engine.runs(status="suspended")] == ["parked"]
    assert [m.run_id for m in await engine.runs(status="ok")] == ["done"]
    assert [m.run_id for m in await engine.runs(limit=1, status="ok")] == ["done"]
    assert len(await engine.runs(limit=1)) == 1
    with pytest.raises(tether.ConfigError, match="unknown run status"):
        await engine.runs(status="finished")
    waited = await engine.wait("parked", timeout=5)  # a run driven here, settled: wait returns its outcome
    assert (waited.status, waited.pending) == ("suspended", ["verdict"])
    await engine.close()


async def test_a_resolution_requeues_a_suspended_run_and_another_worker_finishes_it_with_zero_repays(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    a = spawn_worker(store_url, request_log)
    with workers(a):
        run_id = await client.enqueue(worker_app.approval, {"tag": "h"}, run_id="needs-a-human")
        parked = await client.wait(run_id, timeout=30)
        assert (parked.status, parked.pending) == ("suspended", ["verdict"])
        assert [m.run_id for m in await client.runs(status="suspended")] == [run_id]
    assert a.proc.returncode == 0
    # Resolved from another process (another host, as far as the run can tell), while no worker runs.
    resolved = cli("resolve", run_id, "verdict", '"approved"', "--store", store_url)
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert [m.run_id for m in await client.runs(status="queued")] == [run_id]
    b = spawn_worker(store_url, request_log)
    with workers(b):
        outcome = await client.wait(run_id, timeout=30)
    assert outcome.status == "ok"
    assert outcome.value["verdict"] == "approved"
    assert outcome.value["draft"].endswith(f" by {a.proc.pid}") and outcome.value["final"].endswith(f" by {b.proc.pid}")
    sent = requests(request_log)
    assert {k for k, n in sent.items() if n != 1} == set()  # the draft was paid once, by the first worker
    store = await client.store()
    assert isinstance(store, PostgresStore)
    entry = await store.queue_entry(run_id)
    assert entry is not None and entry.state == "done"


async def test_a_queue_cap_holds_across_worker_processes(
    client: tether.Engine, store_url: str, request_log: Path
) -> None:
    procs = [spawn_worker(store_url, request_log, latency=0.15, concurrency=4, caps="slow=1",
                          queues=("slow", "default")) for _ in range(2)]
    with workers(*procs):
        slow = [await client.enqueue(worker_app.chain, {"tag": f"slow{i}", "n": 1}, queue="slow") for i in range(4)]
        fast = [await client.enqueue(worker_app.chain, {"tag": f"fast{i}", "n": 1}) for i in range(8)]
        await asyncio.gather(*(client.wait(r, timeout=60) for r in slow + fast))
    spans: dict[str, list[float]] = {}
    for r in request_lines(request_log):
        spans.setdefault(r.prompt, []).append(r.at)
    slow_spans = sorted(v for k, v in spans.items() if k.startswith("slow"))
    assert len(slow_spans) == 4
    for (_, end), (start, _) in itertools.pairwise(slow_spans):
        assert start >= end  # never two slow runs at once, across both workers
    fast_spans = sorted(v for k, v in spans.items() if k.startswith("fast"))
    assert any(b[0] < a[1] for a, b in itertools.pairwise(fast_spans))  # the default queue overlaps


def test_the_cli_queues_lists_by_status_and_refuses_a_worker_without_a_queue(store_url: str, tmp_path: Path) -> None:
    queued = cli("run", "worker_app:chain", "--args", '{"tag": "c"}', "--queue", "--run-id", "from-cli",
                 "--budget", "0.5", "--store", store_url)
    assert queued.returncode == 0, queued.stdout + queued.stderr
    assert "from-cli: queued on default" in queued.stdout
    named = cli("run", "worker_app:chain", "--args", '{"tag": "d"}', "--queue", "slow", "--priority", "2",
                "--store", store_url, "--json")
    assert named.returncode == 0 and json.loads(named.stdout)["queue"] == "slow"
    listed = cli("runs", "--status", "queued", "--store", store_url, "--json")
    assert listed.returncode == 0
    runs = json.loads(listed.stdout)
    assert {r["status"] for r in runs} == {"queued"} and len(runs) == 2
    assert cli("runs", "--status", "ok", "--store", store_url, "--json").stdout.strip() == "[]"
    bad = cli("runs", "--status", "nope", "--store", store_url)
    # errors: one line on stderr, non-zero
    assert bad.returncode == 1 and "unknown run status" in bad.stderr and bad.stdout == ""
    sqlite = cli("worker", "--app", "worker_app:engine", "--store", f"sqlite:///{tmp_path}/t.db")
    assert sqlite.returncode == 1 and "postgresql://" in sqlite.stderr
    missing = cli("worker", "--app", "no_such_module:engine")
    assert missing.returncode == 1 and "no_such_module" in missing.stderr
    not_engine = cli("worker", "--app", "worker_app:chain")
    assert not_engine.returncode == 1 and "not a tether.Engine" in not_engine.stderr


async def test_a_handed_back_run_settles_nothing_and_resumes_without_repaying(tmp_path: Path) -> None:
    def slow(request: Any) -> Reply:
        return Reply(text=request.messages[-1].text_content, latency_s=0.3)

    model = tether.models.fake("fake", script=slow)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           workflows=[worker_app.chain])
    handle = engine.start(worker_app.chain, {"tag": "b", "n": 4}, run_id="back")
    await wait_until(lambda: model.calls == 2, what="the second call in flight")
    handle.hand_back("test")
    with pytest.raises(tether.RunHandedBackError, match="handed back"):
        await handle
    journal = await engine.inspect("back")
    assert [e for e in journal if e.key == SETTLE_KEY] == []  # nothing settled
    assert [e.status for e in journal if e.kind == "agent" and e.ref is not None] == ["ok", "cancelled"]
    again = await engine.resume("back")  # the lease was released: no wait
    assert again.status == "ok" and again.replay.hits == 1
    assert model.calls == 5  # 2 before (one cut), 3 after: the completed call was not paid again
    await engine.close()


async def test_an_append_is_one_round_trip_and_concurrent_appends_share_one(pg_dsn: str, pg_schema: str) -> None:
    from tether.contracts.entries import JournalEntry
    from tether.stores.leases import current_owner

    with PausableProxy("127.0.0.1", 5432, delay_s=0.05) as proxy:  # every message waits 50 ms each way
        store = PostgresStore(proxy.url(f"{pg_dsn}?schema={pg_schema}"))
        lease = await store.acquire("r", current_owner(), 60)
        await store.load("r")
        started = time.monotonic()
        for seq in range(1, 11):
            await store.append("r", JournalEntry(kind="step", key=f"s{seq}", status="ok", seq=seq), lease)
        sequential = time.monotonic() - started
        started = time.monotonic()
        seqs = await asyncio.gather(*(store.append("r", JournalEntry(kind="step", key=f"c{i}", status="ok"), lease)
                                      for i in range(10)))
        concurrent = time.monotonic() - started
        await store.close()
    assert sorted(seqs) == list(range(11, 21))
    # One round trip is 100 ms here: ten fenced appends in ~1 s (two round trips each would take 2 s).
    assert 1.0 <= sequential < 1.8, sequential
    # Ten concurrent appends to one run ride in at most a few round trips (group commit), not ten.
    assert concurrent < 0.6, concurrent


def test_the_health_line_names_the_worker_its_queues_and_the_store_without_its_password() -> None:
    store = PostgresStore("postgresql://app:s3cret@db.invalid:5432/prod?schema=jobs")
    engine = tether.Engine(store=store, workflows=[worker_app.chain], queues={"slow": 4}, lease_ttl_s=30)
    line = Worker(engine, queues=["default", "slow"], concurrency=3, worker_id="w-1").health(store)
    assert line.startswith("tether worker w-1 ready: queues default, slow (cap 4); concurrency 3; workflows chain")
    assert "app:***@db.invalid:5432/prod (schema jobs)" in line and "lease ttl 30 s" in line
    assert "s3cret" not in line
    with pytest.raises(tether.ConfigError):
        Worker(engine, concurrency=0)
    with pytest.raises(tether.ConfigError):
        tether.Engine(queues={"slow": 0})


async def test_wait_reports_what_the_driving_segment_lost(tmp_path: Path) -> None:
    @tether.workflow(name="lossy")
    async def lossy(ctx: tether.Ctx) -> int:
        async def bad() -> Any:
            return await ctx.step("bad", lambda: 1 / 0)

        async def good() -> int:
            return 1

        results = await ctx.parallel([good, bad], settle=True)
        return sum(1 for r in results if r.status == "ok")

    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db", workflows=[lossy])
    driven = await engine.run(lossy, {}, run_id="lossy")
    waited = await engine.wait("lossy", timeout=5)
    assert (waited.status, waited.value) == ("ok", 1)
    assert waited.dropped == driven.dropped and len(waited.dropped) == 1
    assert waited.cost == driven.cost
    await engine.close()
