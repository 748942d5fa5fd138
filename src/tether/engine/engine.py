"""`Engine`: configuration (models, prices, routing, workflows, profiles, limits, telemetry), the store, the run API;
forks, schedules, operator actions and views only delegate to their services (docs/internals.md)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Unpack, overload

from ulid import ULID

from tether.contracts.entries import JournalEntry, RunMeta
from tether.contracts.errors import ConfigError
from tether.contracts.prices import Price
from tether.contracts.protocols import ChatModel, ClosableModel, JournalStore
from tether.contracts.schedules import Schedule
from tether.engine import forecast, forks, operator, reads, retention, schedules, sessions
from tether.engine import options as run_options
from tether.engine import queue as run_queue
from tether.engine.checkpoint import AgentTranscript
from tether.engine.config import EngineOptions, Limits, Telemetry, configure
from tether.engine.event_log import EventLog
from tether.engine.events import EventStream
from tether.engine.handle import RunHandle
from tether.engine.operator import CancelResult
from tether.engine.options import ResumeOptions, RunOptions, SegmentOptions, StartOptions
from tether.engine.outcome import RunOutcome
from tether.engine.profiles import AgentProfile
from tether.engine.return_types import ReturnTypes
from tether.engine.runner import drive
from tether.engine.seam import WorkflowRef
from tether.engine.services import RunServices
from tether.engine.store_slot import StoreSlot
from tether.engine.tool_runner import ToolRunner
from tether.engine.workflow import Workflow, as_workflow, resolve_workflow
from tether.journal.cost import CostReport, fold_cost
from tether.journal.tree import TreeReport
from tether.pricing import PriceTable
from tether.routing import ModelLike, Router
from tether.tools.definition import Tool
from tether.tools.permissions import Permissions

if TYPE_CHECKING:
    from tether.engine.fork_preview import ForkPreview
    from tether.journal.diff import RunDiff

DEFAULT_STORE = "sqlite:///.tether/tether.db"
Args = Mapping[str, Any] | None
EventLogPath = str | os.PathLike[str] | None
Models = Mapping[str, str] | Sequence[str] | None


class Engine:
    """An embeddable engine. Registries hang off the instance; nothing is module-global."""

    def __init__(
        self, models: Sequence[ChatModel] = (), store: str | JournalStore = DEFAULT_STORE,
        routing: Mapping[str, ModelLike] | None = None, prices: PriceTable | Mapping[str, Price] | None = None,
        concurrency: int | None = None, *, workflows: Sequence[Workflow] = (),
        profiles: Mapping[str, AgentProfile] | None = None, permissions: Permissions | None = None,
        limits: Limits | None = None, telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time, rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, **options: Unpack[EngineOptions],
    ) -> None:
        """`limits` (`tether.Limits`) and `telemetry` (`tether.Telemetry`: sinks, event log, OpenTelemetry) configure
        the engine; their fields are also accepted as keywords (`max_spawns=`, `otel=`, ...), laid over them."""
        self.limits, self.telemetry = configure(concurrency, limits, telemetry, options)
        self.adapters: dict[str, ChatModel] = {}
        for m in models:
            if m.id in self.adapters:
                raise ConfigError(f"two adapters share the id {m.id!r}; give one a different id")
            self.adapters[m.id] = m
        self.router = Router(self.adapters, dict(routing or {}))
        self.prices = prices if isinstance(prices, PriceTable) else PriceTable(prices or {})
        self.workflows: dict[str, Workflow] = {w.name: w for w in workflows}
        self.workflow_models: dict[str, ModelLike] = {}
        self.profiles: dict[str, AgentProfile] = dict(profiles or {})
        self.permissions = permissions
        self.clock, self.rng, self.sleep = clock, rng or random.Random(), sleep
        self.tool_runner, self._return_types = ToolRunner(), ReturnTypes()
        self.sinks = self.telemetry.build_sinks()
        self._store = StoreSlot(store)

    # -- registries --------------------------------------------------------------------------
    def register(self, wf: Workflow | Callable[..., Awaitable[Any]], *, model: ModelLike | None = None) -> Workflow:
        """Register a workflow by name (so `resume` and the CLI can find it); `model` = its default."""
        w = as_workflow(wf)
        self.workflows[w.name] = w
        if model is not None:
            self.workflow_models[w.name] = model
        return w

    def profile(
        self, agent_type: str, *, model: ModelLike | None = None, system: str | None = None, tools: Sequence[Tool] = (),
        max_turns: int | None = None, max_output_tokens: int | None = None, est_cost: float | None = None,
    ) -> None:
        """Register an agent profile: defaults for every `ctx.agent(..., agent_type=...)`."""
        self.profiles[agent_type] = AgentProfile(model=model, system=system, tools=tuple(tools), max_turns=max_turns,
                                                 max_output_tokens=max_output_tokens, est_cost=est_cost)

    def price_of(self, ref: str) -> Price | None:
        """The price row for `adapter:model`: the table first, then what the adapter itself knows."""
        aid, _, name = ref.partition(":")
        return self.prices.get(ref) or (a.caps(name).price if (a := self.adapters.get(aid)) is not None else None)

    def resolve_workflow(self, wf: WorkflowRef) -> Workflow:
        """The workflow `wf` names: a registered name, or a workflow/function (registered if new)."""
        return resolve_workflow(self.workflows, wf)

    # -- the store ---------------------------------------------------------------------------
    @property
    def store_url(self) -> str | None:
        """The URL the engine's store was given as (None when a store object was passed)."""
        return self._store.url

    async def store(self) -> JournalStore:
        return self._store.get()

    def use_store(self, store: str | JournalStore) -> None:
        """Point the engine at another store before it is first used (`tether worker --store URL`)."""
        self._store.use(store)

    async def close(self) -> None:
        """Close the store and every adapter's SDK client (a later call opens them afresh)."""
        for adapter in self.adapters.values():
            if isinstance(adapter, ClosableModel):
                await adapter.aclose()
        await self._store.close()

    # -- running -----------------------------------------------------------------------------
    def start(self, wf: WorkflowRef, args: Args = None, **options: Unpack[StartOptions]) -> RunHandle:
        """Start a run and return its handle at once (a known `run_id` resumes it). The `tether.StartOptions` are
        `run_id`, `event_log` and the `tether.RunOptions`, all but `deadline_s` fixed at the run's start."""
        run_id, event_log = options.pop("run_id", None), options.pop("event_log", None)
        opts = run_options.segment_options(options, "start()")
        return self.launch(self.resolve_workflow(wf), dict(args or {}), run_id or str(ULID()), opts, event_log)

    def launch(self, wf: Workflow, args: dict[str, Any] | None, run_id: str, opts: SegmentOptions,
               event_log: EventLogPath = None) -> RunHandle:
        """Drive a segment of `run_id` in a task and return its handle (what `start`, resumes and forks share)."""
        events = EventStream(run_id, [*self.sinks, *([EventLog(event_log)] if event_log is not None else [])])
        handle = RunHandle(run_id, events, self.resolve_external)
        drive_it = drive(self.run_services(), self.store, handle, events, wf, args, opts)
        handle._bind(asyncio.get_running_loop().create_task(drive_it))
        return handle

    def run_services(self) -> RunServices:
        """What a segment may use of this engine (read afresh per segment: registries added since count)."""
        lim = self.limits
        return RunServices(
            clock=self.clock, rng=self.rng, sleep=self.sleep, router=self.router, profiles=self.profiles,
            workflow_model=self.workflow_models.get, price_of=self.price_of, tool_runner=self.tool_runner,
            permissions=self.permissions, max_spawns=lim.max_spawns, dispatch_wait_s=lim.dispatch_wait_s,
            concurrency=lim.concurrency, lease_ttl_s=lim.lease_ttl_s, return_types=self._return_types,
            forecast_preview=forecast.preview_cost,
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
        self, wf: WorkflowRef, args: Args = None, *, run_id: str | None = None, queue: str = "default",
        priority: int = 0, **options: Unpack[RunOptions],
    ) -> str:
        """Queue a run for `tether worker` processes (PostgreSQL) and return its id at once (docs/workers.md)."""
        return await run_queue.enqueue(await self.store(), self.clock, self.resolve_workflow(wf), args, run_id=run_id,
                                       queue=queue, priority=priority, options=options)

    async def schedule(
        self, wf: WorkflowRef, *, cron: str, args: Args = None, name: str | None = None, queue: str = "default",
        priority: int = 0, **options: Unpack[RunOptions],
    ) -> Schedule:
        """Queue `wf` once per tick of `cron` (UTC), fired by whichever worker looks first (docs/workers.md)."""
        return await schedules.schedule(self, wf, cron=cron, args=args, name=name, queue=queue, priority=priority,
                                        **options)

    async def wait(self, run_id: str, timeout: float | None = None) -> RunOutcome:  # noqa: ASYNC109 (the named API)
        """`run_id`'s outcome once it settles, wherever driven, folded from the journal (or `TimeoutError`)."""
        return await run_queue.wait(await self.store(), run_id, timeout)

    async def resume(
        self, run_id: str, wf: WorkflowRef | None = None, args: Args = None, *, event_log: EventLogPath = None,
        **options: Unpack[ResumeOptions],
    ) -> RunOutcome:
        """Resume a run from its journal (completed calls replay, zero provider calls) under the options it started
        with; `tether.ResumeOptions` lists what a resume may add. An unknown `run_id` raises `RunNotFoundError`."""
        return await (await self.start_resume(run_id, wf, args, event_log=event_log, **options))

    async def start_resume(
        self, run_id: str, wf: WorkflowRef | None = None, args: Args = None, *, event_log: EventLogPath = None,
        **options: Unpack[ResumeOptions],
    ) -> RunHandle:
        """`resume`, returning the run's handle once the workflow is found (for `tether.progress`)."""
        opts = run_options.resume_options(options)
        wf = wf if wf is not None else await run_queue.stored_workflow(await self.store(), run_id, self.workflows)
        return self.launch(self.resolve_workflow(wf), dict(args) if args is not None else None, run_id, opts, event_log)

    @overload
    async def fork(self, run_id: str, new_run_id: str, workflow: WorkflowRef | None = None, args: Args = None, *,
                   at: int | None = None, preview: Literal[False] = False, models: Models = None,
                   event_log: EventLogPath = None, **options: Unpack[RunOptions]) -> RunOutcome: ...
    @overload
    async def fork(self, run_id: str, new_run_id: str, workflow: WorkflowRef | None = None, args: Args = None, *,
                   at: int | None = None, preview: Literal[True], models: Models = None,
                   event_log: EventLogPath = None, **options: Unpack[RunOptions]) -> ForkPreview: ...

    async def fork(
        self, run_id: str, new_run_id: str, workflow: WorkflowRef | None = None, args: Args = None, *,
        at: int | None = None, preview: bool = False, models: Models = None, event_log: EventLogPath = None,
        **options: Unpack[RunOptions],
    ) -> RunOutcome | ForkPreview:
        """Run `new_run_id` from a copy of `run_id`'s journal (before seq `at`) with an edited `workflow`, `args` or
        `models`: unchanged calls replay; `preview=True` runs and writes nothing (a `ForkPreview`); docs/forks.md."""
        return await forks.fork(self, run_id, new_run_id, workflow, args, at=at, preview=preview, models=models,
                                event_log=event_log, **options)

    def session(self, session_id: str, **options: Unpack[sessions.SessionOptions]) -> sessions.Session:
        return sessions.Session(self, session_id, **options)  # a turn tree on this store: docs/sessions.md

    # -- operator actions on a run (engine/operator.py) ---------------------------------------
    async def resolve_external(self, run_id: str, key: str, value: Any) -> bool:
        """Durably resolve a suspension of a settled run (False: already closed); checked against its schema. A
        `budget` suspension is resolved by a raise: its value is the new USD ceiling (`raise_budget`)."""
        return await operator.resolve(self, run_id, key, value)

    async def raise_budget(self, run_id: str, usd: float, reason: str = "", *, by: str | None = None) -> CostReport:
        """Raise the USD ceiling between segments (never lowered); resolves an open `budget` suspension."""
        return await operator.raise_budget(self, run_id, usd, reason, by)

    async def abandon(self, run_id: str, key_or_seq: str | int, reason: str = "") -> bool:
        """Abandon a suspension (by key) or an entry (by seq) and everything scoped under it."""
        return await operator.close(self, run_id, "abandon", key_or_seq, {"reason": reason})

    async def cancel(self, run_id: str, reason: str = "cancelled") -> CancelResult:
        """Cancel a run from any process: `cancelled` now if nothing drives it, else `requested` of its driver."""
        return await operator.cancel(self, run_id, reason)

    async def settle_orphans(self, run_id: str, usd: float, reason: str = "", *, by: str | None = None) -> CostReport:
        """Charge the calls a crash cut off what the provider billed for them (docs/budgets.md); the new report."""
        return await operator.settle_orphans(self, run_id, usd, reason, by)

    async def delete(self, run_id: str, *, force: bool = False, with_forks: bool = False) -> retention.DeleteReport:
        """Delete a run and all it owns at once (an active run only if `force`; forks stay unless `with_forks`)."""
        return await retention.delete(await self.store(), run_id, force=force, with_forks=with_forks)

    # -- read side (views beyond the journal and cost: engine/reads.py) ------------------------
    async def runs(self, limit: int = 100, *, status: str | None = None) -> list[RunMeta]:
        """Runs newest first; `status` keeps one status (`queued`, `running`, `suspended`, `ok`, ...)."""
        return await run_queue.runs(await self.store(), limit, status)

    async def run_meta(self, run_id: str) -> RunMeta:
        """What the store keeps about a run (workflow, status, args hash, ceiling); unknown is `RunNotFoundError`."""
        return await run_queue.run_meta(await self.store(), run_id)

    async def inspect(self, run_id: str) -> list[JournalEntry]:
        """A run's journal; an unknown run is `RunNotFoundError`, never an empty answer."""
        return await run_queue.journal(await self.store(), run_id)

    async def cost(self, run_id: str) -> CostReport:
        return fold_cost(await self.inspect(run_id))
    forecast = forecast.forecast  # P50/P90/P95 of a run's cost, calls, tokens from past runs (engine/forecast.py)

    async def diff(self, run_a: str, run_b: str) -> RunDiff:
        """Two runs' agent calls side by side (a fork beside its source): outputs, models and cost."""
        return await reads.diff(self, run_a, run_b)

    agent_events = reads.agent_events  # the agent events folded from the journal (engine/reads.py)

    async def agent_tree(self, run_id: str) -> TreeReport:
        """The agent tree (agents, parents, status, tokens, cost, refusals) rebuilt from the store."""
        return await reads.agent_tree(self, run_id)

    async def transcript(self, run_id: str, agent_id: int) -> AgentTranscript:
        """Agent `agent_id`'s conversation as its last checkpoint holds it (read back from the store)."""
        return await reads.transcript(self, run_id, agent_id)

    effect_ledger = reads.effect_ledger  # the run's tool effect ledger rows (engine/reads.py)

    async def export(self, run_id: str, path: str | os.PathLike[str], *, sign_key: str | os.PathLike[str] | None = None,
                     allow_unchained: bool = False) -> Path:
        """Write `run_id`'s audit bundle to `path` (signed with the Ed25519 key at `sign_key`); docs/audit.md."""
        return await reads.export(self, run_id, path, sign_key, allow_unchained)
