"""Drives one segment of a run: lease, load, check, fold, run the body, settle, seal."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tether.budget.accounts import Account
from tether.budget.brakes import SpendRate
from tether.budget.exposure import ExposureGate
from tether.budget.tenant import require_ledger
from tether.contracts.entries import SUPPORTED_HASH_VERSIONS, JournalEntry, Lease, RunMeta, RunStatus
from tether.contracts.errors import (
    BudgetExhaustedError,
    ConfigError,
    JournalCompatibilityError,
    RunNotFoundError,
    TetherError,
)
from tether.contracts.events import ExternalWaiting, RunEnd, RunStart
from tether.contracts.money import usd
from tether.contracts.protocols import JournalStore, LeasableStore
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason
from tether.engine.agent_call import AgentCall
from tether.engine.budget_suspension import budget_closers, can_park, open_budget_suspensions, park_entry
from tether.engine.ctx import Ctx
from tether.engine.events import EventStream
from tether.engine.forecasting import SETTLED_COST, forecast_meta, settled_cost, started_code
from tether.engine.forecasting import gate as forecast_gate
from tether.engine.forecasting import hold as forecast_hold
from tether.engine.frame import CURRENT_FRAME, Frame
from tether.engine.journal_writer import JournalWriter
from tether.engine.lease import LeaseKeeper
from tether.engine.options import SegmentOptions, durable_options, genesis_entry, genesis_of
from tether.engine.outcome import RunOutcome, error_dict, settled_error
from tether.engine.replay import Abandoned, Replay
from tether.engine.segment import Segment
from tether.engine.services import RunServices
from tether.engine.suspensions import Suspensions, pending_keys
from tether.engine.tool_runner import ToolCalls
from tether.engine.tree import Tree
from tether.engine.workflow import Workflow
from tether.journal.canonical import to_jsonable
from tether.journal.cost import (
    BUDGET_RAISED,
    ORPHANS_SETTLED,
    UNPRICED_ALLOWED,
    CostReport,
    decision_name,
    fold_cost,
    money_entries,
    spent_under,
)
from tether.journal.keys import GENESIS_KEY, SETTLE_KEY, args_hash
from tether.journal.lineage import Lineage, kept_meta, lineage_of, settle_members
from tether.journal.matching import JournalIndex
from tether.journal.retained import refuse_retained
from tether.tools.ledger import orphans

if TYPE_CHECKING:
    from tether.engine.handle import RunHandle



def check_compatibility(run_id: str, index: JournalIndex) -> None:
    """All or refusal: one entry outside the supported window refuses the whole resume (the index
    found the first such entry while it was built)."""
    e = index.unsupported
    if e is not None:
        raise JournalCompatibilityError(
            f"run {run_id!r}: entry seq {e.seq} has hash_version {e.hash_version}, but this "
            f"tether reads {sorted(SUPPORTED_HASH_VERSIONS)}. Resume it with the tether version "
            f"that wrote it; nothing was changed.",
            run_id=run_id,
            seq=e.seq,
            hash_version=e.hash_version,
        )


StoreOpener = Callable[[], Awaitable[JournalStore]]


async def drive(
    services: RunServices,
    open_store: StoreOpener,
    handle: RunHandle,
    events: EventStream,
    wf: Workflow,
    args: dict[str, Any] | None,
    opts: SegmentOptions,
) -> RunOutcome:
    """One segment: lease, then load (so the journal read is the head), fold, run the body, settle."""
    with _run_span_closed(events):
        return await _drive(services, await open_store(), handle, events, wf, args, opts)


@contextlib.contextmanager
def _run_span_closed(events: EventStream) -> Iterator[None]:
    """A segment that started and then failed still ends its run span, with the error."""
    try:
        yield
    except BaseException as exc:
        seen = events.events
        if any(isinstance(e, RunStart) for e in seen) and not any(isinstance(e, RunEnd) for e in seen):
            ended: RunStatus = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
            events.emit(RunEnd(status=ended, error_type=type(exc).__name__, error=str(exc)))
        raise
    finally:
        events.close()


async def _drive(
    services: RunServices, store: JournalStore, handle: RunHandle, events: EventStream, wf: Workflow,
    args: dict[str, Any] | None, opts: SegmentOptions,
) -> RunOutcome:
    run_id = handle.run_id
    keeper = None if opts.dry_run or not isinstance(store, LeasableStore) else LeaseKeeper(
        store, run_id, services.lease_ttl_s
    )
    judged = None if opts.resume or opts.dry_run or services.preview else await forecast_gate(
        store, services, run_id, wf, args, opts)  # a refusal raises here, before the lease: nothing is written
    async with keeper if keeper is not None else contextlib.nullcontext():
        entries = await store.load(run_id)
        index = JournalIndex.build(entries, opts.invalidate)  # the one pass over the journal
        check_compatibility(run_id, index)
        refuse_retained(run_id, index.decision_entries)  # an archived or redacted run holds no payloads to replay
        meta = await store.get_meta(run_id)
        if (opts.resume or opts.dry_run) and not entries and meta is None:
            raise RunNotFoundError(
                f"no run {run_id!r} in this store; nothing was started. Check the run id (tether runs lists "
                f"them) and the store URL, or start the run with engine.run(...).",
                run_id=run_id,
            )
        if args is None:
            args = dict(meta.args) if meta is not None and isinstance(meta.args, dict) else {}
        args_json = to_jsonable(args, what="workflow args")
        genesis = genesis_of(entries)
        asked = opts
        opts = durable_options(run_id, opts, genesis, index.decision_entries)
        require_ledger(store, opts.budgets)  # before anything is written
        budget = opts.ceiling
        relaxed = relaxations(services.clock, run_id, asked, opts, genesis, budget, index)
        if opts.raise_budget_usd is not None:
            budget = opts.raise_budget_usd
        root = Account(budget, name="run")
        root.restore(*spent_under(money_entries(index.spend_entries, index.decision_entries), None))
        seg = _segment(services, store, run_id, wf.name, index, events, root, opts,
                       keeper.lease if keeper is not None else None)
        if keeper is not None:
            keeper.on_lost(seg.journal.lose)
            keeper.on_cancel(seg.cancel.abort)
        ctx = Ctx(seg, AgentCall(seg))
        handle._attach(seg)
        if seg.index.match("", GENESIS_KEY) is None and not opts.dry_run:
            # durable before any effect can run
            await seg.journal.append(genesis_entry(services.clock(), wf.name, args_json, opts, code_hash=wf.code_hash,
                                                     forecast=judged))
        for decision in relaxed:  # an operator's raise, durable before anything it lets the body do
            stored = await seg.journal.append(decision)
            if stored.kind == "decision":  # (a raise's closers of budget suspensions are no money decision)
                seg.replay.money_reset_seq = stored.seq or seg.replay.money_reset_seq
        live_meta: RunMeta | None = None
        if not opts.dry_run:
            now = services.clock()
            live_meta = RunMeta(
                run_id=run_id,
                workflow=wf.name,
                status="running",
                args_hash=args_hash(args_json),
                args=args_json,
                budget_usd=budget,
                created_at=meta.created_at if meta else now,
                updated_at=now,
                segments=(meta.segments + 1) if meta else 1,
                **{**kept_meta(meta), "code_hash": started_code(seg.index, wf), **forecast_meta(seg.index)},
            )
            # a queued run's claim already says it runs: its meta rides the segment's first write
            if not (meta is not None and meta.status == "queued" and seg.journal.carry_meta(live_meta)):
                await seg.journal.put_meta(live_meta)
        c = opts.containment
        events.emit(RunStart(workflow=wf.name, resumed=bool(entries), max_agents=c.max_agents if c else None,
                             **seg.figures()))
        try:
            status, value, error = await _run_body(seg, ctx, wf, args, opts)
        finally:
            await seg.resources.aclose()  # MCP servers stop at settle, error and cancel alike
        if status == "exhausted" and error is None:
            error = ceiling_refusal(seg)
        if seg.journal.lost is not None:
            raise seg.journal.lost
        if seg.handed_back is not None and status == "cancelled":
            raise seg.handed_back  # unsettled on purpose: the next driver resumes it from here
        if status == "exhausted" and opts.on_exhausted == "suspend" and await _parked_on_budget(seg, error):
            status, value, error = "suspended", None, None
        outcome = await _settle(seg, status, value, error, live_meta)
    events.emit(_run_end(outcome, seg))
    return outcome


async def _parked_on_budget(seg: Segment, error: Any) -> bool:
    """Under `on_exhausted="suspend"`: park the run on a `budget` suspension naming what it needs, instead of
    settling it `exhausted` (False: not the run's USD ceiling, so a raise would not let it go on).

    A resume that changed no money finds its suspension still open and parks on it again, appending nothing.
    """
    if seg.dry_run or not can_park(seg.root, seg.tree.tokens, seg.index, seg.replay.money_reset_seq):
        return False
    if not open_budget_suspensions(seg.index):
        spent = fold_cost(money_entries(seg.index.spend_entries, seg.index.decision_entries)).total_usd
        message = str(error.get("message") or "") if isinstance(error, dict) else getattr(error, "message", "")
        entry = await seg.journal.append(park_entry(seg.root, seg.index, spent, message, seg.services.clock()))
        seg.events.emit(ExternalWaiting(key=str(entry.value["key"])))
    return True


def _run_end(outcome: RunOutcome, seg: Segment) -> RunEnd:
    failed = error_dict(outcome.error) if outcome.status in ("error", "cancelled") else None
    return RunEnd(
        status=outcome.status, cost_usd=outcome.cost.total_usd, orphaned_usd=outcome.cost.orphaned_usd,
        orphaned_calls=outcome.cost.orphaned_calls, reused_usd=outcome.cost.reused_usd,
        reused_calls=outcome.cost.reused_calls, usage=outcome.usage,
        hits=outcome.replay.hits, misses=outcome.replay.misses, reruns=outcome.replay.reruns,
        pending=list(outcome.pending), error_type=str(failed.get("type")) if failed else None,
        error=str(failed.get("message")) if failed else None, **seg.figures(),
    )


def _segment(
    services: RunServices, store: JournalStore, run_id: str, workflow: str, index: JournalIndex,
    events: EventStream, root: Account, opts: SegmentOptions, lease: Lease | None,
) -> Segment:
    """The segment's parts, wired: its journal writer, replay lookup, suspensions, tree and tool calls."""
    cancel = Signal()
    journal = JournalWriter(run_id, store, index, cancel, lease=lease, dry_run=opts.dry_run)
    replay = Replay(run_id, index, dry_run=opts.dry_run,
                    money_reset_seq=money_reset_seq(index.decision_entries, lineage_of(index.entries[:1])))
    return Segment(
        run_id=run_id,
        workflow=workflow,
        services=services,
        index=index,
        events=events,
        journal=journal,
        replay=replay,
        waits=Suspensions(journal, replay, events, services.clock),
        tree=Tree(journal, events, root, services.clock, opts.containment, services.concurrency),
        tools=ToolCalls(services.tool_runner, store, run_id, services.clock),
        root=root,
        cancel=cancel,
        strict_pricing=bool(opts.strict_pricing),
        allow_unpriced=bool(opts.allow_unpriced),
        exposure=(
            ExposureGate(opts.max_in_flight_exposure_usd, root)
            if opts.max_in_flight_exposure_usd is not None
            else None
        ),
        hard_ceiling=(opts.overshoot or "hard") == "hard",
        max_identical_tool_calls=opts.max_identical_tool_calls, max_repeated_spawns=opts.max_repeated_spawns,
        spend_rate=(SpendRate(opts.max_spend_rate_usd_per_min, services.clock)
                    if opts.max_spend_rate_usd_per_min is not None else None),
    )


def relaxations(
    clock: Callable[[], float], run_id: str, asked: SegmentOptions, opts: SegmentOptions,
    genesis: JournalEntry | None,
    ceiling: float | None, index: JournalIndex,
) -> list[JournalEntry]:
    """The operator decisions a resume journals before its body runs: a raised ceiling (never a lowered
    one), and unpriced models allowed for a run that started without it."""
    out: list[JournalEntry] = []
    raise_to = opts.raise_budget_usd
    if raise_to is not None:
        if opts.dry_run:
            raise ConfigError("a dry run writes nothing, so it cannot raise the ceiling; resume without dry_run=True")
        out.extend(raise_entries(clock(), run_id, genesis, ceiling, raise_to, opts.raise_reason, index))
    started = genesis.value if genesis is not None and isinstance(genesis.value, dict) else {}
    if asked.allow_unpriced and genesis is not None and not started.get("allow_unpriced") and not any(
        decision_name(e) == UNPRICED_ALLOWED for e in index.decision_entries
    ):
        if opts.dry_run:
            raise ConfigError("a dry run writes nothing, so it cannot allow unpriced models; resume without "
                              "dry_run=True")
        out.append(operator_decision(clock(), UNPRICED_ALLOWED, reason=opts.raise_reason))
    return out


def raise_entries(
    now: float, run_id: str, genesis: JournalEntry | None, ceiling: float | None, raise_to: float, reason: str,
    index: JournalIndex, by: str | None = None,
) -> list[JournalEntry]:
    """An operator's raise of the run's USD ceiling: the `budget-raised` decision, then a resolution of each open
    `budget` suspension (what a raise resolves); refused for a run not started, without a ceiling, or lower."""
    if genesis is None:
        raise ConfigError(f"raise_budget_usd= raises the ceiling of an existing run; {run_id!r} has not started. "
                          f"Start it with budget_usd=... instead.", run_id=run_id)
    if ceiling is None:
        raise ConfigError(f"run {run_id!r} has no USD ceiling to raise; it is not bounded in USD.", run_id=run_id)
    if raise_to <= ceiling:
        raise ConfigError(
            f"raise_budget_usd={raise_to} does not raise the ceiling of run {run_id!r}, which is "
            f"{usd(ceiling)} USD; a ceiling is never lowered. Pass a larger value.",
            run_id=run_id, ceiling=ceiling, asked=raise_to,
        )
    decision = operator_decision(now, BUDGET_RAISED, old_usd=ceiling, new_usd=raise_to, reason=reason)
    if by is not None:
        decision.value["by"] = by
    return [decision, *budget_closers(index, raise_to, reason=reason, by=decision.value["by"], at=now)]


def operator_decision(clock: float, name: str, **fields: Any) -> JournalEntry:
    """A run-level decision an operator made (who, when, why). Unkeyed: it is a fact every fold reads, never a
    call a resume matches."""
    return JournalEntry(kind="decision", label=name, started_at=clock,
                        value={"decision": name, **fields, "by": operator(), "at": clock})


def operator() -> str:
    """Who made an operator decision: the OS user and host of the process."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def money_reset_seq(decisions: Iterable[JournalEntry], lineage: Lineage | None = None) -> int:
    """The seq of the last decision that changed the money (a raise, an orphan settlement), or just past a
    fork's copied prefix (a fork has money of its own): admission refusals and ceiling stops journaled
    before it are decided again, against the figures as they are now."""
    seqs = [e.seq or 0 for e in decisions if e.scope == "" and decision_name(e) in (BUDGET_RAISED, ORPHANS_SETTLED)]
    return max(seqs, default=lineage.reused_through + 1 if lineage is not None else 0)


def ceiling_refusal(seg: Segment) -> BudgetExhaustedError | None:
    """The refusal that made a run `exhausted` (its agent, the reserve that did not fit, what was left), typed
    as an escaping refusal is: a body that caught it, and a resume that replays the stop, report the same."""
    for acct, ceiling in ((seg.root, StopReason.USD_CEILING), (seg.tree.tokens, StopReason.TOKEN_CEILING)):
        if acct.stopped is not None:
            data = {"kind": "budget", **acct.stop_data}
            data["reason"] = StopReason.parse(data.get("reason")) or ceiling  # a stop recorded without one
            return BudgetExhaustedError(acct.stopped, **data)
    if seg.root.reached():
        return BudgetExhaustedError(f"the {usd(seg.root.ceiling)} USD ceiling was reached", kind="budget",
                                    account=seg.root.name, remaining_usd=0.0, reason=StopReason.USD_CEILING)
    return None


def ceiling_stopped(seg: Segment) -> bool:
    """Whether one of the run's own ceilings (its USD ceiling, the tree's tokens) stopped work."""
    return seg.root.exhausted or seg.tree.tokens.exhausted


async def _run_body(seg: Segment, ctx: Ctx, wf: Workflow, args: dict[str, Any], opts: SegmentOptions) -> tuple[
    RunStatus, Any, Any
]:
    frame = Frame(scope="", account=seg.root, workflow=wf.name)

    async def body() -> Any:
        CURRENT_FRAME.set(frame)
        await forecast_hold(seg)  # `forecast_gate="suspend"`: parked until approved when the forecast was over
        return await wf.fn(ctx, **args)

    task = asyncio.create_task(body())
    parked = asyncio.create_task(seg.waits.all_parked.wait())
    cancelled = asyncio.create_task(seg.cancel.wait())
    waiters: set[asyncio.Task[Any]] = {task, parked, cancelled}
    try:
        await asyncio.wait(waiters, timeout=opts.deadline, return_when=asyncio.FIRST_COMPLETED)
    finally:
        parked.cancel()
        cancelled.cancel()
    if not task.done():
        reason = "suspended" if seg.waits.all_parked.is_set() else ("cancelled" if seg.cancel.aborted else "deadline")
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        if reason == "suspended":
            # a ceiling that stopped work outranks the parked branches: exhausted, with `pending` still listed
            return ("exhausted" if ceiling_stopped(seg) else "suspended"), None, None
        return "cancelled", None, {"type": "Cancelled", "message": seg.cancel.reason or reason}
    exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
    if exc is None:
        value = task.result()
        status: RunStatus = "exhausted" if ceiling_stopped(seg) else "ok"
        return status, value, None
    if isinstance(exc, BudgetExhaustedError):
        return "exhausted", None, exc
    if isinstance(exc, asyncio.CancelledError) or seg.cancel.aborted:
        # Failed after the segment was cancelled (an agent the cancel cut ended `cancelled`, and the
        # workflow raised that before its task could be cancelled): the run was cancelled.
        return "cancelled", None, {"type": "Cancelled", "message": seg.cancel.reason or "cancelled"}
    if isinstance(exc, Abandoned):
        return "cancelled", None, exc
    return "error", None, exc


def _dropped_json(seg: Segment) -> list[Any]:
    """The segment's dropped branches as the settle entry keeps them (so `engine.wait` can report them)."""
    try:
        dropped = to_jsonable([d.model_dump(mode="json") for d in seg.dropped], what="dropped branches")
    except (TetherError, ValueError):
        return []
    return dropped if isinstance(dropped, list) else []


async def _settle(seg: Segment, status: RunStatus, value: Any, error: Any, meta: RunMeta | None) -> RunOutcome:
    """Append `run_settle` when the segment wrote something or the status changed, then seal."""
    pending = pending_keys(seg.index)
    stored_value = None
    if status in ("ok", "exhausted") and value is not None:
        try:
            stored_value = to_jsonable(value, what="the workflow's return value")
        except TetherError as exc:
            status, error, value = "error", exc, None
    last = seg.index.last_settle()
    last_status = last.value.get("status") if last is not None and isinstance(last.value, dict) else None
    cost: CostReport | None = None
    settled: RunMeta | None = None
    if not seg.dry_run:
        settling = seg.journal.appended or seg.journal.deferred or last_status != status
        if settling:  # staged, made durable below (with the settled meta, where the store can carry it)
            seg.journal.stage_awaited(
                JournalEntry(
                    kind="decision",
                    key=SETTLE_KEY,
                    ordinal=seg.index.next_ordinal("", SETTLE_KEY),
                    label="settle",
                    started_at=seg.services.clock(),
                    value={
                        "decision": "settle",
                        "status": status,
                        "value": stored_value,
                        "error": settled_error(error),
                        "pending": pending,
                        "dropped": _dropped_json(seg),
                        **settle_members(seg.index),
                    },
                )
            )
        if meta is not None:  # with the cost report's figures, for forecasts (engine/forecasting.py)
            cost = fold_cost(money_entries(seg.index.spend_entries, seg.index.decision_entries))
            settled = meta.model_copy(update={
                "status": status, "updated_at": seg.services.clock(), SETTLED_COST: settled_cost(cost)})
            if settling and seg.journal.carry_meta(settled):  # one commit with the settle entry
                settled = None
        if settling:  # the segment's last write: a worker's next claim may carry it (`ClaimRiding`)
            await seg.journal.flush(last=settled is None)
        if settled is not None:  # after the settle entry is durable
            await seg.journal.put_meta(settled)
    cost = cost or fold_cost(money_entries(seg.index.spend_entries, seg.index.decision_entries))  # all it reads
    orphaned = [r.idempotency_key for r in await orphans(seg.journal.store, seg.run_id)]
    return RunOutcome(
        run_id=seg.run_id,
        status=status,
        value=value,
        error=error,
        cost=cost,
        usage=cost.usage,
        dropped=list(seg.dropped),
        pending=pending if status in ("suspended", "exhausted") else [],
        replay=seg.replay.stats(orphaned),
        warnings=list(seg.warnings),
    )
