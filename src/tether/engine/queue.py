"""The run queue from the engine's side: `enqueue`, `wait`, listings and reads, re-queue on resolution.

A queued run is written whole before any worker sees it: its genesis entry (workflow, args hash and
the durable options every resume reads back), its meta (status `queued`) and its queue row, in one
transaction. Workers (`tether.worker`) drive it through the public engine API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, cast, get_args

from ulid import ULID

from tether.budget.tenant import require_ledger
from tether.contracts.entries import SETTLED_STATUSES, JournalEntry, Lease, MetaStatus, RunMeta, RunStatus
from tether.contracts.errors import ConfigError, RunNotFoundError
from tether.contracts.protocols import JournalStore, QueueStore
from tether.contracts.queue import QueuedRun, settled_topic
from tether.engine.options import RunOptions, durable_options, genesis_entry, genesis_of, segment_options
from tether.engine.outcome import DroppedBranch, RunOutcome, outcome_error
from tether.engine.workflow import Workflow
from tether.journal.canonical import to_jsonable
from tether.journal.chain import chained
from tether.journal.cost import fold_cost
from tether.journal.keys import args_hash
from tether.journal.matching import JournalIndex

STATUSES: tuple[str, ...] = get_args(MetaStatus)
_POLL_S = (0.02, 0.5)  # `wait` polls from 20 ms up to 0.5 s between looks (a notification cuts it short)


def queue_store(store: JournalStore, what: str) -> QueueStore:
    """`store` as a `QueueStore`, or a `ConfigError` that says to use PostgreSQL."""
    if isinstance(store, QueueStore):
        return store
    raise ConfigError(
        f"{what} needs a store that holds a run queue, and {type(store).__name__} does not; use a PostgreSQL "
        f"store (store='postgresql://user@host:5432/db'), which every worker on every host shares.",
        store=type(store).__name__,
    )


def check_status(status: str | None) -> None:
    if status is not None and status not in STATUSES:
        raise ConfigError(f"unknown run status {status!r}; use one of: {', '.join(STATUSES)}", status=status)


def _check_queue(queue: str, priority: int) -> None:
    if not isinstance(queue, str) or not queue.strip() or len(queue) > 200:
        raise ConfigError(f"queue must be a non-empty name of at most 200 characters, got {queue!r}")
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise ConfigError(f"priority must be an int (higher runs first), got {priority!r}")


async def enqueue(
    store: JournalStore,
    clock: Callable[[], float],
    wf: Workflow,
    args: Mapping[str, Any] | None,
    *,
    run_id: str | None,
    queue: str,
    priority: int,
    options: RunOptions,
) -> str:
    """Write the run (genesis with its durable options, meta `queued`, queue row) and return its id."""
    _check_queue(queue, priority)
    opts = segment_options(options, "enqueue()")
    if opts.forecast_gate is not None:
        raise ConfigError("forecast_gate= judges a run started here (engine.run/start); a queued run is not judged. "
                          "Check engine.forecast(...) before enqueueing it, and bound it with budget_usd=.")
    store = queue_store(store, "enqueue()")
    require_ledger(store, opts.budgets)
    run_id = run_id or str(ULID())
    args_json = to_jsonable(dict(args or {}), what="workflow args")
    entries = await store.load(run_id)
    genesis: JournalEntry | None = None
    meta = await store.get_meta(run_id)
    if entries:  # an existing run joins the queue as it stands; its fixed options must agree
        started = genesis_of(entries)
        opts = durable_options(run_id, opts, started)
        if started is not None and isinstance(started.value, dict):
            stored = started.value.get("args_hash")
            if stored is not None and args is not None and stored != args_hash(args_json):
                raise ConfigError(
                    f"run {run_id!r} exists with other args; enqueue it without args (or the same ones), or "
                    f"use a new run_id.",
                    run_id=run_id,
                )
            if started.value.get("workflow") not in (None, wf.name):
                raise ConfigError(
                    f"run {run_id!r} is a run of workflow {started.value.get('workflow')!r}, not {wf.name!r}; "
                    f"enqueue it with its own workflow, or use a new run_id.",
                    run_id=run_id,
                )
    else:
        genesis = genesis_entry(clock(), wf.name, args_json, opts, code_hash=wf.code_hash)
        genesis.seq = 1
        chained([], genesis)
    now = clock()
    if meta is None:
        meta = RunMeta(
            run_id=run_id, workflow=wf.name, status="queued", args_hash=args_hash(args_json), args=args_json,
            budget_usd=opts.ceiling, created_at=now, updated_at=now, segments=0,
        )
    else:
        meta = meta.model_copy(update={"status": "queued", "updated_at": now})
    budgets = [b.to_json() for b in opts.budgets] if opts.budgets else None
    run = QueuedRun(run_id=run_id, workflow=wf.name, queue=queue, priority=priority, deadline_s=opts.deadline_s,
                    budgets=budgets, reserve_usd=opts.ceiling or 0.0)
    await store.enqueue(run, meta, genesis)
    return run_id


def outcome_of(run_id: str, meta: RunMeta | None, entries: list[JournalEntry]) -> RunOutcome | None:
    """The outcome of a settled run, folded from its journal; None while it is queued or running."""
    if meta is None:
        return None
    status = "error" if meta.status == "dead" else meta.status  # a dead-lettered run settled `error`
    if status not in SETTLED_STATUSES:
        return None
    last = JournalIndex.build(entries).last_settle()
    settled = last.value if last is not None and isinstance(last.value, dict) else {}
    if settled.get("status", status) != status:
        return None  # the meta moved on (a new segment started): look again
    cost = fold_cost(entries)
    return RunOutcome(
        run_id=run_id,
        status=cast(RunStatus, status),  # a settled status, checked above
        value=settled.get("value"),
        error=outcome_error(settled.get("error")),
        cost=cost,
        usage=cost.usage,
        pending=list(settled.get("pending") or []),
        dropped=[DroppedBranch.model_validate(d) for d in settled.get("dropped") or []],
    )


async def wait(store: JournalStore, run_id: str, timeout_s: float | None) -> RunOutcome:
    """Return the run's outcome once it settles, wherever it is driven; `TimeoutError` after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    wakeups = await store.subscribe([settled_topic(run_id)]) if isinstance(store, QueueStore) else None
    pause = _POLL_S[0]
    try:
        while True:
            if wakeups is not None:
                wakeups.clear()
            meta = await store.get_meta(run_id)
            entries = await store.load(run_id)
            if meta is None and not entries:
                raise RunNotFoundError(
                    f"no run {run_id!r} in this store, so there is nothing to wait for. Check the run id "
                    f"(tether runs lists them) and the store URL.",
                    run_id=run_id,
                )
            outcome = outcome_of(run_id, meta, entries)
            if outcome is not None:
                return outcome
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                status = meta.status if meta is not None else "unknown"
                raise TimeoutError(f"run {run_id!r} did not settle within {timeout_s:g} s (it is {status})")
            step = pause if left is None else min(pause, left)
            if wakeups is not None:
                await wakeups.wait(step)
            else:
                await asyncio.sleep(step)
            pause = min(pause * 2, _POLL_S[1])
    finally:
        if wakeups is not None:
            wakeups.close()


async def runs(store: JournalStore, limit: int, status: str | None) -> list[RunMeta]:
    """Runs newest first, optionally only those in `status` (filtered by the store when it can)."""
    check_status(status)
    if status is None:
        return await store.list_runs(limit=limit)
    if isinstance(store, QueueStore):
        return await store.list_runs(limit=limit, status=status)
    # Stores without a status filter: read the whole listing, so `limit` counts matching runs.
    matching = [m for m in await store.list_runs(limit=2**62) if m.status == status]
    return matching[:limit]


def run_not_found(run_id: str) -> RunNotFoundError:
    return RunNotFoundError(f"no run {run_id!r} in this store. Check the run id (tether runs lists them) and the "
                            f"store URL.", run_id=run_id)


async def run_meta(store: JournalStore, run_id: str) -> RunMeta:
    """What the store keeps about a run; an unknown run is `RunNotFoundError`."""
    meta = await store.get_meta(run_id)
    if meta is None:
        raise run_not_found(run_id)
    return meta


async def journal(store: JournalStore, run_id: str) -> list[JournalEntry]:
    """A run's journal for the read side; an unknown run is `RunNotFoundError`, never an empty answer."""
    entries = await store.load(run_id)
    if not entries and await store.get_meta(run_id) is None:
        raise run_not_found(run_id)
    return entries


async def stored_workflow(store: JournalStore, run_id: str, workflows: Mapping[str, Workflow]) -> Workflow:
    """The registered workflow a stored run names (a resume given none); `RunNotFoundError` for an unknown run."""
    meta = await store.get_meta(run_id)
    name = meta.workflow if meta is not None else None
    if name is None and not await store.load(run_id):
        raise RunNotFoundError(f"no run {run_id!r} in this store; nothing was resumed. Check the run id (tether runs "
                               f"lists them) and the store URL.", run_id=run_id)
    if name is None or name not in workflows:
        raise ConfigError(f"cannot resume {run_id!r}: workflow {name!r} is not registered; pass it to resume() or "
                          f"engine.register() it", run_id=run_id)
    return workflows[name]


async def requeue_before_close(store: JournalStore, lease: Lease | None) -> None:
    """A suspended queued run goes back to its queue before a resolution is journaled under `lease`.

    In this order a crash in between leaves the run queued (a worker settles it suspended again), never
    resolved but parked. Workers can claim it once the lease is released.
    """
    if lease is not None and isinstance(store, QueueStore):
        await store.requeue(lease)
