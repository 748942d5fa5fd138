"""A tenant's budget across runs and workers: real `tether worker` processes on one PostgreSQL store.

The fake model bills 100 input and 20 output tokens per call at 1 and 1,000 USD per million: 0.0201
USD a call, each call capped at 30 output tokens (a worst case of about 0.0301). The request log holds
every call any process sent (`start`) and every reply that completed (`done`).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from workerkit import request_lines, spawn_worker, wait_until, workers

import tether
from tether.stores.postgres import PostgresStore

CALL_USD = 100 * 1.0 / 1e6 + 20 * 1000.0 / 1e6
PRICED = {"WORKER_OUTPUT_PRICE": "1000"}


@pytest.fixture
async def budget_client(store_url: str) -> AsyncIterator[tuple[tether.Engine, PostgresStore]]:
    import worker_app

    store = PostgresStore(store_url)
    engine = tether.Engine(store=store, workflows=[worker_app.budgeted])
    yield engine, store
    await engine.close()


def _billed(log: Path) -> tuple[int, int]:
    """(calls whose reply completed, calls sent) across every process."""
    lines = request_lines(log)
    return sum(r.event == "done" for r in lines), sum(r.event == "start" for r in lines)


async def _settled_or_waiting(engine: tether.Engine, run_ids: list[str]) -> dict[str, tether.RunOutcome | str]:
    """Each run's outcome once settled, or the reason it waits in the queue; raises while any is in between."""
    out: dict[str, tether.RunOutcome | str] = {}
    for run_id in run_ids:
        meta = await engine.run_meta(run_id)
        waiting = (meta.model_extra or {}).get("waiting")
        if meta.status == "queued" and waiting:
            out[run_id] = str(waiting)
        elif meta.status in ("ok", "exhausted", "error"):
            out[run_id] = await engine.wait(run_id, timeout=5)
        else:
            raise AssertionError(f"{run_id} is {meta.status}")
    return out


@pytest.mark.timeout(120)
async def test_a_tenant_budget_holds_across_four_workers_and_fifty_runs(
    budget_client: tuple[tether.Engine, PostgresStore], store_url: str, request_log: Path,
) -> None:
    engine, store = budget_client
    budget = tether.Budget(usd=1.00, window="day", scope="tenant:acme")
    ids = [
        await engine.enqueue("budgeted", {"tag": f"t{i}"}, run_id=f"t{i}", queue="tenant", budgets=[budget],
                             budget_usd=0.08)
        for i in range(50)
    ]
    began = time.monotonic()
    procs = [spawn_worker(store_url, request_log, queues=("tenant",), latency=0.05, concurrency=4, ttl=5,
                          env_extra=PRICED) for _ in range(4)]
    with workers(*procs):
        final: dict[str, tether.RunOutcome | str] = {}

        async def quiet() -> bool:
            nonlocal final
            try:
                final = await _settled_or_waiting(engine, ids)
                return True
            except AssertionError:
                return False

        deadline = time.monotonic() + 90
        while not await quiet():
            assert time.monotonic() < deadline, "runs did not settle or wait on the budget within 90 s"
            await asyncio.sleep(0.2)
        elapsed = time.monotonic() - began
    done, sent = _billed(request_log)
    billed = done * CALL_USD
    (usage,) = await store.budget_usage("tenant:acme")
    ok = [r for r, o in final.items() if isinstance(o, tether.RunOutcome) and o.status == "ok"]
    exhausted = {r: o for r, o in final.items() if isinstance(o, tether.RunOutcome) and o.status == "exhausted"}
    waiting = {r: o for r, o in final.items() if isinstance(o, str)}
    print(f"\n50 runs, 4 workers: billed {billed:.4f} USD of 1.00 ({done} calls, {sent} sent), ledger charged "
          f"{usage.charged_usd:.4f} held {usage.held_usd:.4f}; {len(ok)} ok, {len(exhausted)} exhausted, "
          f"{len(waiting)} queued on the budget; {elapsed:.1f} s from the first worker's start")
    assert done == sent  # nothing cut: every call sent was paid in full
    assert billed <= 1.00 + 1e-9
    assert usage.charged_usd <= 1.00 + 1e-9 and usage.held_usd == pytest.approx(0.0, abs=1e-9)
    assert usage.charged_usd == pytest.approx(billed)
    assert billed >= 1.00 - 3 * 0.0301  # the budget was used, not refused early
    assert len(ok) + len(exhausted) + len(waiting) == 50 and len(ok) >= 20
    for run_id, outcome in exhausted.items():  # every refused run says why
        assert isinstance(outcome.error, tether.BudgetExhaustedError), (run_id, outcome.error)
        message = str(outcome.error)
        assert "scope 'tenant:acme'" in message and "1.00 USD" in message, (run_id, message)
        assert outcome.error.data["reason"] is tether.StopReason.TENANT_BUDGET, (run_id, outcome.error.data)
    for run_id, reason in waiting.items():
        assert reason.startswith("budget: scope tenant:acme") and "limit 1.0000 USD per day" in reason, reason
        assert (await store.queue_entry(run_id)).waiting == reason  # type: ignore[union-attr]


@pytest.mark.timeout(120)
async def test_a_worker_killed_mid_reservation_loses_no_budget_for_good(
    budget_client: tuple[tether.Engine, PostgresStore], store_url: str, request_log: Path,
) -> None:
    engine, store = budget_client
    budget = tether.Budget(usd=0.30, scope="tenant:crash")
    ids = [await engine.enqueue("budgeted", {"tag": f"k{i}"}, run_id=f"k{i}", queue="crash", budgets=[budget])
           for i in range(3)]
    slow = spawn_worker(store_url, request_log, queues=("crash",), latency=30, ttl=2, env_extra=PRICED)
    with workers(slow):
        await wait_until(lambda: _billed(request_log)[1] == 3, 30, "three calls in flight")
        (usage,) = await store.budget_usage("tenant:crash")
        assert usage.held_usd == pytest.approx(3 * 0.0301, abs=0.001)  # each call holds its worst case
        slow.signal(signal.SIGKILL)
        slow.proc.wait(10)
    rescuer = spawn_worker(store_url, request_log, queues=("crash",), latency=0.02, ttl=2, env_extra=PRICED)
    with workers(rescuer):
        outcomes = [await engine.wait(r, timeout=60) for r in ids]
        (usage,) = await store.budget_usage("tenant:crash")
        folded = sum(o.cost.total_usd for o in outcomes)
        cut = sum(o.cost.orphaned_usd for o in outcomes)
        print(f"\nafter the kill: ledger charged {usage.charged_usd:.4f} held {usage.held_usd:.4f}; journals "
              f"{folded:.4f} ({cut:.4f} of it the 3 cut calls at their worst case)")
        assert [o.status for o in outcomes] == ["ok", "ok", "ok"]
        assert usage.held_usd == pytest.approx(0.0, abs=1e-9)  # the dead worker's holds were reclaimed
        assert usage.charged_usd == pytest.approx(folded, abs=1e-6)  # the ledger and the journals agree
        assert usage.charged_usd <= 0.30
        # What is left is usable: a new run spends it, and the scope is charged no more than the limit.
        extra = await engine.enqueue("budgeted", {"tag": "after"}, run_id="k-after", queue="crash", budgets=[budget])
        after = await engine.wait(extra, timeout=30)
        (usage,) = await store.budget_usage("tenant:crash")
        assert after.status == "ok" and usage.charged_usd == pytest.approx(folded + 2 * CALL_USD, abs=1e-6)
        assert usage.held_usd == pytest.approx(0.0, abs=1e-9)
