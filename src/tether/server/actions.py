"""The write side of the API: resolve a suspension, cancel a run, start a run of the app."""

from __future__ import annotations

from starlette.responses import Response

from tether.contracts.entries import JournalEntry
from tether.contracts.protocols import QueueStore
from tether.engine.open_suspensions import OpenSuspension, SuspensionNotFoundError, check_value, find_open
from tether.engine.options import Containment
from tether.server.api import load_run, state_of
from tether.server.models import (
    CancelRequest,
    CancelResult,
    ResolveRequest,
    ResolveResult,
    StartRequest,
    StartResult,
)
from tether.server.routing import ApiError, Call
from tether.server.state import ServerState


async def resolve(call: Call) -> ResolveResult:
    """Close suspension `key`: wake the parked branch of a run driven here, or journal it durably.

    A tool approval takes exactly `"allow"` or `"deny"` (422 `invalid-resolution` otherwise, nothing
    written). A run that had settled `suspended` and whose workflow this server's engine has registered
    is then resumed here, so it carries on without another command.
    """
    state, body = state_of(call), call.body
    assert isinstance(body, ResolveRequest)
    run_id = call.run_id
    meta, entries = await load_run(state, run_id)
    check_value(_open_suspension(run_id, body.key, entries), body.value, run_id)
    live = state.driving(run_id)
    if live is not None:
        if not await live.handle.resolve_external(body.key, body.value):
            _open_suspension(run_id, body.key, (await load_run(state, run_id))[1])
            raise _already_resolved(run_id, body.key)
        return ResolveResult(run_id=run_id, key=body.key, woke_live_run=True, resumed=False, status="running")
    if not await state.engine.resolve_external(run_id, body.key, body.value):
        raise _already_resolved(run_id, body.key)
    resumed = _resume_here(state, run_id, meta.status, meta.workflow, meta.args)
    return ResolveResult(run_id=run_id, key=body.key, woke_live_run=False, resumed=resumed,
                         status="running" if resumed else meta.status)


def _resume_here(state: ServerState, run_id: str, status: str, workflow: str, args: object) -> bool:
    if status != "suspended" or state.mode != "app" or workflow not in state.engine.workflows:
        return False
    state.track(state.engine.start(workflow, args if isinstance(args, dict) else {}, run_id=run_id))
    return True


def _open_suspension(run_id: str, key: str, entries: list[JournalEntry]) -> OpenSuspension:
    """The open suspension `key`, else 409 `already-resolved` (it was closed) or 404 listing the open keys."""
    try:
        found = find_open(entries, run_id, key)
    except SuspensionNotFoundError as exc:
        raise ApiError(404, exc.code, exc.message, **exc.data) from None
    if found is None:
        raise _already_resolved(run_id, key)
    return found


def _already_resolved(run_id: str, key: str) -> ApiError:
    return ApiError(409, "already-resolved", f"suspension {key!r} of run {run_id!r} is already closed (the first "
                    f"resolution wins); nothing was written", run_id=run_id, key=key)


SETTLED = ("ok", "error", "exhausted", "cancelled")


async def cancel(call: Call) -> CancelResult:
    """Cancel a run the way `tether cancel` does (`engine.cancel`), or stop it at once when it is driven here.

    A run nothing drives (suspended, queued, or its driver died) is settled `cancelled` now; a run another
    process drives gets the durable cancel request its driver reads at its next lease renewal (`cancelled:
    false`); a run driven here is stopped by this server. Until it settles, `status` says `running`. A run
    that settled answers 409 `run-settled`.
    """
    state, body = state_of(call), call.body
    assert isinstance(body, CancelRequest)
    live = state.driving(call.run_id)
    if live is not None:
        live.handle.cancel(body.reason)
        return CancelResult(run_id=call.run_id, reason=body.reason, status="running")
    meta, _ = await load_run(state, call.run_id)
    if meta.status in SETTLED:
        raise ApiError(409, "run-settled", f"run {call.run_id!r} already finished {meta.status!r}; there is nothing "
                       f"to cancel (a suspended run can be cancelled)", run_id=call.run_id, status=meta.status)
    result = await state.engine.cancel(call.run_id, body.reason)  # a race with its settling is a 409 (sealed)
    settled = result == "cancelled"
    return CancelResult(run_id=call.run_id, cancelled=settled, reason=body.reason,
                        status="cancelled" if settled else "running")


async def start(call: Call) -> StartResult | Response:
    """Start a run of a workflow registered with the app engine (driven, and cancellable, here), or with
    `queue` enqueue it for `tether worker` processes."""
    state, body = state_of(call), call.body
    assert isinstance(body, StartRequest)
    engine = state.engine
    if state.mode != "app":
        raise ApiError(409, "no-app-engine", "this server only reads a store; start it with --app MODULE:ENGINE "
                       "to start runs")
    if body.workflow not in engine.workflows:
        raise ApiError(404, "workflow-not-found", f"no workflow named {body.workflow!r} is registered with the app "
                       f"engine; known: {sorted(engine.workflows)}", workflow=body.workflow,
                       known=sorted(engine.workflows))
    if body.run_id is not None and (await (await engine.store()).get_meta(body.run_id)) is not None:
        raise ApiError(409, "run-exists", f"run {body.run_id!r} already exists; pick another run_id (a resolve "
                       f"resumes a suspended run)", run_id=body.run_id)
    containment = Containment(**body.containment.model_dump()) if body.containment is not None else None
    if body.queue is not None:  # a worker pool drives it; nothing runs in this process
        if not isinstance(await engine.store(), QueueStore):
            raise ApiError(409, "no-queue", "this server's store holds no run queue; enqueue on a PostgreSQL store "
                           "(postgresql://...) that tether worker processes share, or omit queue to run here")
        run_id = await engine.enqueue(body.workflow, body.args, run_id=body.run_id, budget_usd=body.budget_usd,
                                      queue=body.queue, priority=body.priority, containment=containment,
                                      deadline_s=body.deadline_s)
        return StartResult(run_id=run_id, workflow=body.workflow, status="queued", url=f"/api/runs/{run_id}")
    handle = engine.start(body.workflow, body.args, run_id=body.run_id, budget_usd=body.budget_usd,
                          containment=containment, deadline_s=body.deadline_s)
    state.track(handle)
    return StartResult(run_id=handle.run_id, workflow=body.workflow, status="running",
                       url=f"/api/runs/{handle.run_id}")
