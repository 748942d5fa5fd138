"""`Engine`: registries (models, prices, workflows, profiles), the store, and the run API."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Unpack, overload

from ulid import ULID

from tether.budget.admission import LIFETIME_SPAWNS
from tether.budget.gate import DISPATCH_WAIT_S
from tether.budget.tenant import require_ledger
from tether.contracts import money
from tether.contracts.entries import JournalEntry, Lease, RunMeta
from tether.contracts.errors import ConfigError, JournalSealedError, LeaseHeldError, RunNotFoundError
from tether.contracts.events import AgentEvent, ToolEffectRecord
from tether.contracts.prices import Price
from tether.contracts.protocols import ChatModel, ClosableModel, JournalStore, LeasableStore
from tether.contracts.schedules import Schedule
from tether.engine import queue as run_queue
from tether.engine.budget_suspension import budget_need, raise_of
from tether.engine.checkpoint import AgentTranscript
from tether.engine.event_log import EventLog
from tether.engine.events import EventSink, EventStream
from tether.engine.handle import RunHandle
from tether.engine.lease import LeaseKeeper, request_cancel
from tether.engine.options import (
    ResumeOptions,
    RunOptions,
    SegmentOptions,
    StartOptions,
    resume_options,
    segment_options,
    stored_options,
)
from tether.engine.outcome import RunOutcome
from tether.engine.profiles import AgentProfile
from tether.engine.raises import raise_ceiling
from tether.engine.return_types import ReturnTypes
from tether.engine.runner import drive, operator_decision
from tether.engine.services import RunServices
from tether.engine.suspensions import pending_keys, suspension_key
from tether.engine.tool_runner import ToolRunner
from tether.engine.workflow import Workflow, as_workflow
from tether.journal.chain import chained
from tether.journal.cost import ORPHANS_SETTLED, CostReport, fold_cost
from tether.journal.keys import SETTLE_KEY
from tether.journal.matching import JournalIndex
from tether.journal.tree import TreeReport
from tether.pricing import PriceTable
from tether.routing import ModelLike, Router
from tether.tools.definition import Tool
from tether.tools.permissions import Permissions

if TYPE_CHECKING:
    from tether.engine.fork_preview import ForkPreview
    from tether.journal.diff import RunDiff

DEFAULT_STORE = "sqlite:///.tether/tether.db"
CLOSE_PATIENCE_S = 5.0
"""How long `resolve_external` / `abandon` wait for the lease of a run whose driver is letting it go."""
CancelResult = Literal["cancelled", "requested"]
"""`engine.cancel`: settled `cancelled` now, or a request the driving process honours at its next renewal."""
WorkflowRef = Workflow | Callable[..., Awaitable[Any]] | str
"""A workflow, the `async def` it wraps, or the name it was registered under."""
Args = Mapping[str, Any] | None
STORE_SCHEMES = ("memory://", "jsonl://", "sqlite://", "postgresql://", "postgres://")


class Engine:
    """An embeddable engine. Registries hang off the instance; nothing is module-global."""

    def __init__(
        self,
        models: Sequence[ChatModel] = (),
        store: str | JournalStore = DEFAULT_STORE,
        routing: Mapping[str, ModelLike] | None = None,
        prices: PriceTable | Mapping[str, Price] | None = None,
        concurrency: int = 12,
        *,
        workflows: Sequence[Workflow] = (),
        profiles: Mapping[str, AgentProfile] | None = None,
        permissions: Permissions | None = None,
        max_spawns: int = LIFETIME_SPAWNS,
        lease_ttl_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        event_log: str | os.PathLike[str] | None = None,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        otel: bool = False,
        capture_content: bool = False,
        sinks: Sequence[EventSink] = (),
        queues: Mapping[str, int] | None = None,
        dispatch_wait_s: float = DISPATCH_WAIT_S,
    ) -> None:
        """`event_log` writes every run's events as JSONL (`{run_id}` in the path: a file per run);
        `tracer_provider` / `meter_provider` (or `otel=True` for the global ones) export OpenTelemetry
        GenAI spans and metrics (extra `otel`; prompts and completions only with `capture_content=True`);
        `sinks` receive every event of every run. See docs/observability.md. `dispatch_wait_s` bounds how long
        a call waits under the hard ceiling for in-flight calls to settle (docs/budgets.md)."""
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        for name, cap in (queues or {}).items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise ConfigError(f"queues[{name!r}] must be a positive int (runs at once across all workers), "
                                  f"got {cap!r}")
        if dispatch_wait_s <= 0:
            raise ConfigError(f"dispatch_wait_s must be > 0, got {dispatch_wait_s}")
        self.dispatch_wait_s = dispatch_wait_s
        self.queues: dict[str, int] = dict(queues or {})
        """Cluster-wide caps of runs held at once per queue, enforced when workers claim."""
        self.adapters: dict[str, ChatModel] = {}
        for m in models:
            if m.id in self.adapters:
                raise ConfigError(f"two adapters share the id {m.id!r}; give one a different id")
            self.adapters[m.id] = m
        self.router = Router(self.adapters, dict(routing or {}))
        self.prices = prices if isinstance(prices, PriceTable) else PriceTable(prices or {})
        self.concurrency = concurrency
        self.workflows: dict[str, Workflow] = {w.name: w for w in workflows}
        self.workflow_models: dict[str, ModelLike] = {}
        self.profiles: dict[str, AgentProfile] = dict(profiles or {})
        self.lease_ttl_s = lease_ttl_s
        self.permissions = permissions
        self.max_spawns = max_spawns
        self.clock = clock
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.tool_runner = ToolRunner()
        self._return_types = ReturnTypes()
        self.sinks: list[EventSink] = [*sinks, *([EventLog(event_log)] if event_log is not None else [])]
        if otel or tracer_provider is not None or meter_provider is not None:
            # The exporter is a shell over the public event stream; it is imported only when asked for.
            from tether.observability.otel import OtelExporter

            self.sinks.append(OtelExporter(tracer_provider, meter_provider, capture_content=capture_content))
        self._store_spec = store
        self._store: JournalStore | None = None
        if isinstance(store, str) and not store.startswith(STORE_SCHEMES):
            raise ConfigError(
                f"unknown store URL {store!r}; use one of: memory://, jsonl:///dir, "
                f"sqlite:///path.db, postgresql://user@host/db, or pass a store object",
                url=store,
            )

    # -- registries --------------------------------------------------------------------------
    def register(self, wf: Workflow | Callable[..., Awaitable[Any]], *, model: ModelLike | None = None) -> Workflow:
        """Register a workflow by name (so `resume` and the CLI can find it); `model` = its default."""
        w = as_workflow(wf)
        self.workflows[w.name] = w
        if model is not None:
            self.workflow_models[w.name] = model
        return w

    def profile(
        self,
        agent_type: str,
        *,
        model: ModelLike | None = None,
        system: str | None = None,
        tools: Sequence[Tool] = (),
        max_turns: int | None = None,
        max_output_tokens: int | None = None,
        est_cost: float | None = None,
    ) -> None:
        """Register an agent profile: defaults for every `ctx.agent(..., agent_type=...)`."""
        self.profiles[agent_type] = AgentProfile(
            model=model, system=system, tools=tuple(tools), max_turns=max_turns,
            max_output_tokens=max_output_tokens, est_cost=est_cost,
        )

    def workflow_model(self, name: str) -> ModelLike | None:
        return self.workflow_models.get(name)

    def price_of(self, ref: str) -> Price | None:
        """The price row for `adapter:model`: the table first, then what the adapter itself knows."""
        row = self.prices.get(ref)
        if row is not None:
            return row
        adapter_id, _, name = ref.partition(":")
        adapter = self.adapters.get(adapter_id)
        return adapter.caps(name).price if adapter is not None else None

    @property
    def store_url(self) -> str | None:
        """The URL the engine's store was given as (None when a store object was passed)."""
        return self._store_spec if isinstance(self._store_spec, str) else None

    async def store(self) -> JournalStore:
        if self._store is None:
            from tether.stores import open_store

            self._store = open_store(self._store_spec)
        return self._store

    def use_store(self, store: str | JournalStore) -> None:
        """Point the engine at another store before it is first used (`tether worker --store URL`)."""
        if self._store is not None:
            raise ConfigError("use_store() must be called before the engine first uses its store")
        if isinstance(store, str) and not store.startswith(STORE_SCHEMES):
            raise ConfigError(f"unknown store URL {store!r}; use one of: {', '.join(STORE_SCHEMES)}", url=store)
        self._store_spec = store

    async def close(self) -> None:
        """Close the store and every adapter's SDK client (a later call opens them afresh)."""
        for adapter in self.adapters.values():
            if isinstance(adapter, ClosableModel):
                await adapter.aclose()
        if self._store is not None:
            await self._store.close()
            self._store = None

    # -- running -----------------------------------------------------------------------------
    def start(self, wf: WorkflowRef, args: Args = None, **options: Unpack[StartOptions]) -> RunHandle:
        """Start a run and return its handle at once (a known `run_id` resumes that run).

        The options are `tether.StartOptions`: `run_id`, `event_log` (this run's events appended to a JSONL
        file, besides the engine's sinks) and the `tether.RunOptions` (`budget_usd`, `containment`,
        `overshoot`, ...), all but `deadline_s` fixed at the run's start: resuming an existing run keeps them
        (a different value is refused).
        """
        run_id, event_log = options.pop("run_id", None), options.pop("event_log", None)
        opts = segment_options(options, "start()")
        args_ = dict(args) if args is not None else {}
        return self._launch(self._workflow(wf), args_, run_id or str(ULID()), opts, event_log)

    def _launch(
        self, wf: Workflow, args: dict[str, Any] | None, run_id: str, opts: SegmentOptions,
        event_log: str | os.PathLike[str] | None = None,
    ) -> RunHandle:
        events = EventStream(run_id, [*self.sinks, *([EventLog(event_log)] if event_log is not None else [])])
        handle = RunHandle(run_id, events, self.resolve_external)
        drive_it = drive(self._services(), self.store, handle, events, wf, args, opts)
        handle._bind(asyncio.get_running_loop().create_task(drive_it))
        return handle

    def _services(self) -> RunServices:
        """What a segment may use of this engine (read afresh per segment: registries added since count)."""
        return RunServices(
            clock=self.clock, rng=self.rng, sleep=self.sleep, router=self.router, profiles=self.profiles,
            workflow_model=self.workflow_model, price_of=self.price_of, tool_runner=self.tool_runner,
            permissions=self.permissions, max_spawns=self.max_spawns, dispatch_wait_s=self.dispatch_wait_s,
            concurrency=self.concurrency, lease_ttl_s=self.lease_ttl_s, return_types=self._return_types,
        )

    async def run(self, wf: WorkflowRef, args: Args = None, **options: Unpack[StartOptions]) -> RunOutcome:
        """Start a run and wait for its outcome (the options are `start`'s)."""
        return await self.start(wf, args, **options)

    def run_sync(self, wf: WorkflowRef, args: Args = None, **options: Unpack[StartOptions]) -> RunOutcome:
        """`run` for scripts without an event loop (the engine's store is closed afterwards)."""

        async def main() -> RunOutcome:
            try:
                return await self.run(wf, args, **options)
            finally:
                await self.close()

        return asyncio.run(main())

    async def enqueue(
        self,
        wf: Workflow | Callable[..., Awaitable[Any]] | str,
        args: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        queue: str = "default",
        priority: int = 0,
        **options: Unpack[RunOptions],
    ) -> str:
        """Queue a run for `tether worker` processes (PostgreSQL stores) and return its id at once.

        The run is written whole first (durable options in its genesis, status `queued`). Higher
        `priority` runs first, then the oldest. An id already queued is left as it is (idempotent).
        The run options are `start`'s.
        """
        return await run_queue.enqueue(
            await self.store(), self.clock, self._workflow(wf), args, run_id=run_id, queue=queue, priority=priority,
            options=options,
        )

    async def schedule(
        self,
        wf: Workflow | Callable[..., Awaitable[Any]] | str,
        *,
        cron: str,
        args: Mapping[str, Any] | None = None,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        **options: Unpack[RunOptions],
    ) -> Schedule:
        """Queue `wf` once per tick of `cron` (UTC, by the store's clock), fired by whichever worker looks first.

        Each tick's run is `sched:<name>:<tick>` (so one run per tick however many workers); `name`
        defaults to the workflow's. Declaring the same schedule again changes nothing (docs/workers.md).
        """
        from tether.worker.schedules import add_schedule, schedule_store

        flow = self._workflow(wf)
        opts = segment_options(options, "schedule()")
        store = await self.store()
        require_ledger(store, opts.budgets)
        return await add_schedule(schedule_store(store, "engine.schedule()"), name or flow.name, flow.name, cron,
                                  args, queue, priority, stored_options(opts))

    async def wait(self, run_id: str, timeout: float | None = None) -> RunOutcome:  # noqa: ASYNC109 (the named API)
        """The outcome of `run_id` once it settles, wherever it is driven (`TimeoutError` after `timeout` s).

        The outcome is folded from the journal: its value is the journaled JSON form.
        """
        return await run_queue.wait(await self.store(), run_id, timeout)

    async def resume(
        self,
        run_id: str,
        wf: Workflow | Callable[..., Awaitable[Any]] | str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        event_log: str | os.PathLike[str] | None = None,
        **options: Unpack[ResumeOptions],
    ) -> RunOutcome:
        """Resume a run from its journal; completed calls replay with zero provider calls.

        The run keeps the options it started with; the run options given may only repeat them
        (`deadline_s` is this segment's own). `dry_run=True` is replay-strict and writes nothing;
        `invalidate=[seq, ...]` runs those entries again. Two options relax the stored ones, journaled as
        an operator's decision before the body runs (with `raise_reason`): `raise_budget_usd` raises the
        USD ceiling (`budget-raised`; lowering is refused) and `allow_unpriced=True` accepts unpriced
        models (`unpriced-allowed`). An unknown `run_id` raises `RunNotFoundError`.
        """
        return await (await self.start_resume(run_id, wf, args, event_log=event_log, **options))

    async def start_resume(
        self,
        run_id: str,
        wf: Workflow | Callable[..., Awaitable[Any]] | str | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        event_log: str | os.PathLike[str] | None = None,
        **options: Unpack[ResumeOptions],
    ) -> RunHandle:
        """`resume`, returning the run's handle once the workflow is found (for `tether.progress`)."""
        opts = resume_options(options)
        store = await self.store()
        meta = await store.get_meta(run_id)
        if wf is None:
            name = meta.workflow if meta is not None else None
            if name is None and not await store.load(run_id):
                raise RunNotFoundError(
                    f"no run {run_id!r} in this store; nothing was resumed. Check the run id (tether runs "
                    f"lists them) and the store URL.",
                    run_id=run_id,
                )
            if name is None or name not in self.workflows:
                raise ConfigError(
                    f"cannot resume {run_id!r}: workflow {name!r} is not registered; pass it to "
                    f"resume() or engine.register() it",
                    run_id=run_id,
                )
            wf = self.workflows[name]
        return self._launch(self._workflow(wf), dict(args) if args is not None else None, run_id, opts, event_log)

    @overload
    async def fork(
        self, run_id: str, new_run_id: str, workflow: Workflow | Callable[..., Awaitable[Any]] | str | None = None,
        args: Mapping[str, Any] | None = None, *, at: int | None = None, preview: Literal[False] = False,
        models: Mapping[str, str] | Sequence[str] | None = None, event_log: str | os.PathLike[str] | None = None,
        **options: Unpack[RunOptions],
    ) -> RunOutcome: ...
    @overload
    async def fork(
        self, run_id: str, new_run_id: str, workflow: Workflow | Callable[..., Awaitable[Any]] | str | None = None,
        args: Mapping[str, Any] | None = None, *, at: int | None = None, preview: Literal[True],
        models: Mapping[str, str] | Sequence[str] | None = None, event_log: str | os.PathLike[str] | None = None,
        **options: Unpack[RunOptions],
    ) -> ForkPreview: ...

    async def fork(
        self, run_id: str, new_run_id: str, workflow: Workflow | Callable[..., Awaitable[Any]] | str | None = None,
        args: Mapping[str, Any] | None = None, *, at: int | None = None, preview: bool = False,
        models: Mapping[str, str] | Sequence[str] | None = None, event_log: str | os.PathLike[str] | None = None,
        **options: Unpack[RunOptions],
    ) -> RunOutcome | ForkPreview:
        """Run `new_run_id` from a copy of `run_id`'s journal (entries before seq `at`, when given) with the
        edited `workflow`, `args` or `models` (label -> `adapter:model`): unchanged calls replay, reported as
        `cost.reused_usd`, and the ceiling bounds only new spend. Options not given are the source's. With
        `preview=True` nothing runs or is written: a `ForkPreview` (reused, invalidated, new calls, forecast).
        The source run is never written (docs/forks.md)."""
        from tether.engine.fork import parse_models, plan_fork, write_fork

        store = await self.store()
        swaps = parse_models(models)
        for ref in swaps.values():
            self.router.resolve_ref(ref)  # an unknown adapter is refused before anything is read or written
        meta = await store.get_meta(run_id)
        wf = workflow if workflow is not None else (meta.workflow if meta is not None else None)
        if wf is None:
            raise RunNotFoundError(f"no run {run_id!r} in this store to fork; check the run id (tether runs lists "
                                   f"them) and the store URL", run_id=run_id)
        plan = await plan_fork(store, run_id, new_run_id, self._workflow(wf), args, at=at, models=swaps,
                               given=segment_options(options, "fork()"), now=self.clock())
        if preview:
            from tether.engine.fork_preview import preview_fork

            return await preview_fork(store, self._services(), plan, await store.load(run_id))
        await write_fork(store, plan)
        return await self._launch(plan.workflow, plan.args, new_run_id, plan.opts, event_log)

    def _workflow(self, wf: Workflow | Callable[..., Awaitable[Any]] | str) -> Workflow:
        if isinstance(wf, str):
            if wf not in self.workflows:
                raise ConfigError(f"no workflow named {wf!r} is registered; known: {sorted(self.workflows)}")
            return self.workflows[wf]
        w = as_workflow(wf)
        self.workflows.setdefault(w.name, w)
        return w

    # -- closing suspensions of settled runs --------------------------------------------------
    async def resolve_external(self, run_id: str, key: str, value: Any) -> bool:
        """Durably resolve a suspension of a settled run; False when it was already closed.

        The value is checked against the schema its `await_external` declared (stored with the
        suspension); an invalid one raises `InvalidResolutionError` and nothing is journaled. A `budget`
        suspension is resolved by a raise: its value is the new USD ceiling (`raise_budget`).
        """
        target = _find_target(JournalIndex.build(await self._journal(run_id)), key)
        need = budget_need(target) if target is not None else None
        if need is not None:
            usd, reason = raise_of(value, need, run_id)
            await self.raise_budget(run_id, usd, reason)
            return True
        return await self._close(run_id, "resolution", key, value)

    async def raise_budget(self, run_id: str, usd: float, reason: str = "", *, by: str | None = None) -> CostReport:
        """Raise `run_id`'s USD ceiling to `usd` between segments, without driving it: a `budget-raised`
        decision (who, when, why, the old and the new ceiling; never lowered), which also resolves the run's
        open `budget` suspension. The next segment, in any process, runs under it and continues the agents
        the ceiling stopped from their checkpoints (docs/budgets.md). Returns the cost report as it now stands.
        """
        if isinstance(usd, bool) or not isinstance(usd, int | float) or not usd > 0:
            raise ConfigError(f"usd must be the new USD ceiling (> 0), got {usd!r}")
        await self._journal(run_id)  # an unknown run is refused before any lease is taken for it
        store = await self.store()
        keeper = (LeaseKeeper(store, run_id, self.lease_ttl_s, patience_s=CLOSE_PATIENCE_S)
                  if isinstance(store, LeasableStore) else None)
        async with keeper if keeper is not None else contextlib.nullcontext():
            return await raise_ceiling(store, run_id, float(usd), reason, by=by, now=self.clock(),
                                       lease=keeper.lease if keeper is not None else None)

    async def abandon(self, run_id: str, key_or_seq: str | int, reason: str = "") -> bool:
        """Abandon a suspension (by key) or an entry (by seq) and everything scoped under it."""
        return await self._close(run_id, "abandon", key_or_seq, {"reason": reason})

    async def cancel(self, run_id: str, reason: str = "cancelled") -> CancelResult:
        """Cancel a run from any process.

        A run no live segment drives (suspended, or its driver died) is settled `cancelled` at once
        (`"cancelled"`). A run another process drives gets a durable request that its segment reads at its
        next lease renewal (a third of the lease TTL) and settles `cancelled` on (`"requested"`). A run
        that already finished is refused (`JournalSealedError`); an unknown one is `RunNotFoundError`.
        """
        store = await self.store()
        await self._journal(run_id)  # an unknown run is refused before any lease is taken for it
        if not isinstance(store, LeasableStore):
            return await self._settle_cancelled(store, run_id, reason, None)
        try:
            async with LeaseKeeper(store, run_id, self.lease_ttl_s) as lease:
                return await self._settle_cancelled(store, run_id, reason, lease)
        except LeaseHeldError:
            await request_cancel(store, run_id, reason, self.clock())
            return "requested"

    async def _settle_cancelled(
        self, store: JournalStore, run_id: str, reason: str, lease: Lease | None
    ) -> CancelResult:
        entries = await self._journal(run_id)
        index = JournalIndex.build(entries)
        last = index.last_settle()
        status = last.value.get("status") if last is not None and isinstance(last.value, dict) else None
        if status == "cancelled":
            return "cancelled"
        if status in ("ok", "error", "exhausted"):
            raise JournalSealedError(
                f"run {run_id!r} already finished {status}; there is nothing to cancel", run_id=run_id, status=status
            )
        pending = pending_keys(index)
        await store.append(run_id, chained(entries, JournalEntry(
            seq=len(entries) + 1, kind="decision", key=SETTLE_KEY, ordinal=index.next_ordinal("", SETTLE_KEY),
            label="settle", started_at=self.clock(),
            value={"decision": "settle", "status": "cancelled", "value": None,
                   "error": {"type": "Cancelled", "message": reason}, "pending": pending},
        )), lease)
        meta = await store.get_meta(run_id)
        if meta is not None:
            await store.put_meta(meta.model_copy(update={"status": "cancelled", "updated_at": self.clock()}), lease)
        return "cancelled"

    async def _close(
        self, run_id: str, kind: Literal["resolution", "abandon"], target_ref: str | int, value: Any
    ) -> bool:
        store = await self.store()
        # A run that just settled may still be handing its lease back (a worker releases it with its next
        # claim): wait a few seconds for it rather than refusing the resolution at once.
        keeper = (LeaseKeeper(store, run_id, self.lease_ttl_s, patience_s=CLOSE_PATIENCE_S)
                  if isinstance(store, LeasableStore) else None)
        async with keeper if keeper is not None else contextlib.nullcontext():
            entries = await store.load(run_id)  # read under the lease: this is the head we append after
            if not entries:
                raise RunNotFoundError(f"no run {run_id!r} in this store; check the run id and the store URL",
                                       run_id=run_id)
            index = JournalIndex.build(entries)
            target = _find_target(index, target_ref)
            if target is None:
                if kind == "resolution" and any(suspension_key(e) == target_ref for e in index.suspensions()):
                    return False  # already closed: the first valid closer won
                if isinstance(target_ref, int) and target_ref in index.by_seq and kind == "abandon":
                    target = index.by_seq[target_ref]
                else:
                    raise ConfigError(f"run {run_id!r} has no open suspension or entry {target_ref!r}")
            if kind == "resolution" and target.kind not in ("external", "approval"):
                raise JournalSealedError(f"seq {target.seq} is a {target.kind} entry, not a suspension")
            if kind == "resolution":  # against the schema stored in the entry: nothing is written if invalid
                from tether.engine.external import check_resolution

                value = check_resolution(target, value, None, run_id=run_id)
            await run_queue.requeue_before_close(store, keeper.lease if keeper is not None else None)
            closer = chained(entries, JournalEntry(
                seq=len(entries) + 1, kind=kind, ref=target.seq, scope=target.scope, key=target.key, value=value,
                started_at=self.clock(),
            ))
            await store.append(run_id, closer, keeper.lease if keeper is not None else None)
        return True

    async def settle_orphans(self, run_id: str, usd: float, reason: str = "", *, by: str | None = None) -> CostReport:
        """Replace the worst-case charge of the calls a crash cut off with what the provider billed for them.

        Journals an `orphans-settled` decision (who, when, why, the old and the new figure); the cost report
        and every later segment's ceiling checks use `usd` for those calls from then on (calls cut off by a
        later crash are charged at their worst case again). Returns the cost report as it now stands.
        """
        if isinstance(usd, bool) or not isinstance(usd, int | float) or usd < 0:
            raise ConfigError(f"usd must be the USD the provider billed for the cut calls (>= 0), got {usd!r}")
        store = await self.store()
        keeper = (LeaseKeeper(store, run_id, self.lease_ttl_s, patience_s=CLOSE_PATIENCE_S)
                  if isinstance(store, LeasableStore) else None)
        async with keeper if keeper is not None else contextlib.nullcontext():
            entries = await self._journal(run_id)
            before = fold_cost(entries)
            if before.orphaned_calls == 0:
                raise ConfigError(
                    f"run {run_id!r} has no calls a crash cut off (orphaned_usd is {money.usd(before.orphaned_usd)}); "
                    f"there is nothing to settle. `tether cost {run_id}` shows its figures.",
                    run_id=run_id,
                )
            decision = operator_decision(self.clock(), ORPHANS_SETTLED, usd=float(usd), old_usd=before.orphaned_usd,
                                         calls=before.orphaned_calls, reason=reason)
            if by is not None:
                decision.value["by"] = by
            decision.seq = max((e.seq or 0 for e in entries), default=0) + 1
            chained(entries, decision)
            await store.append(run_id, decision, keeper.lease if keeper is not None else None)
        return fold_cost([*entries, decision])

    async def _journal(self, run_id: str) -> list[JournalEntry]:
        """A run's journal for the read side; an unknown run is `RunNotFoundError`, never an empty answer."""
        store = await self.store()
        entries = await store.load(run_id)
        if not entries and await store.get_meta(run_id) is None:
            raise RunNotFoundError(
                f"no run {run_id!r} in this store. Check the run id (tether runs lists them) and the store URL.",
                run_id=run_id,
            )
        return entries

    # -- read side ---------------------------------------------------------------------------
    async def runs(self, limit: int = 100, *, status: str | None = None) -> list[RunMeta]:
        """Runs newest first; `status` keeps one status (`queued`, `running`, `suspended`, `ok`, ...)."""
        return await run_queue.runs(await self.store(), limit, status)

    async def run_meta(self, run_id: str) -> RunMeta:
        """What the store keeps about a run (workflow, status, args hash, ceiling); unknown is `RunNotFoundError`."""
        meta = await (await self.store()).get_meta(run_id)
        if meta is None:
            raise RunNotFoundError(
                f"no run {run_id!r} in this store. Check the run id (tether runs lists them) and the store URL.",
                run_id=run_id,
            )
        return meta

    async def inspect(self, run_id: str) -> list[JournalEntry]:
        return await self._journal(run_id)

    async def cost(self, run_id: str) -> CostReport:
        return fold_cost(await self.inspect(run_id))

    async def diff(self, run_a: str, run_b: str) -> RunDiff:
        """Two runs' agent calls side by side (a fork beside its source): outputs, models and cost."""
        from tether.journal.diff import diff_runs

        return diff_runs(run_a, await self.inspect(run_a), run_b, await self.inspect(run_b))

    async def agent_events(self, run_id: str) -> list[AgentEvent]:
        from tether.journal.tree import fold_agent_events

        return fold_agent_events(await self.inspect(run_id))

    async def agent_tree(self, run_id: str) -> TreeReport:
        """The agent tree (agents, parents, status, tokens, cost, refusals) rebuilt from the store."""
        from tether.journal.tree import fold_tree

        return fold_tree(await self.inspect(run_id))

    async def transcript(self, run_id: str, agent_id: int) -> AgentTranscript:
        """Agent `agent_id`'s conversation as its last checkpoint holds it (read back from the store)."""
        from tether.engine.checkpoint import checkpoint_key, read_transcript

        entries = await self._journal(run_id)
        running = next((e for e in entries if e.kind == "agent" and e.ref is None and e.agent_id == agent_id), None)
        if running is None or running.seq is None:
            raise ConfigError(f"run {run_id!r} has no agent #{agent_id}; engine.agent_tree(run_id) lists its agents",
                              run_id=run_id, agent_id=agent_id)
        terminal = JournalIndex.build(entries).terminal_of.get(running.seq)
        ref = (terminal.checkpoint_ref if terminal is not None else None) or checkpoint_key(run_id, running.seq)
        expect = terminal.checkpoint_sha256 if terminal is not None else None  # the chain vouches for a settled one
        return await read_transcript(await self.store(), agent_id, ref, expect)

    async def effect_ledger(self, run_id: str) -> list[ToolEffectRecord]:
        from tether.tools.ledger import records

        await self._journal(run_id)
        return await records(await self.store(), run_id)

    async def export(self, run_id: str, path: str | os.PathLike[str], *, sign_key: str | os.PathLike[str] | None = None,
                     allow_unchained: bool = False) -> Path:
        """Write `run_id`'s audit bundle to `path` (signed with the Ed25519 key at `sign_key`); docs/audit.md."""
        from tether.audit.bundle import build_bundle, write_bundle

        await self._journal(run_id)
        doc = await build_bundle(await self.store(), run_id, self.price_of, allow_unchained=allow_unchained)
        return write_bundle(doc, path, sign_key)


def _find_target(index: JournalIndex, ref: str | int) -> JournalEntry | None:
    if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
        e = index.by_seq.get(int(ref))
        if e is not None and (e.kind not in ("external", "approval") or e.seq not in index.closer_of):
            return e
        return None
    for e in index.open_suspensions():
        if suspension_key(e) == ref:
            return e
    return None
