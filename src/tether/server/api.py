"""The read side of the API: runs, journal, tree, cost, ledger, transcripts and the event stream."""

from __future__ import annotations

from starlette.responses import Response

from tether.contracts.entries import JournalEntry, RunMeta
from tether.journal.cost import CostReport, fold_cost
from tether.journal.diff import RunDiff
from tether.journal.matching import JournalIndex
from tether.server import views
from tether.server.events import followed_events, live_events
from tether.server.models import (
    ForkList,
    Health,
    JournalPage,
    JournalQuery,
    LedgerView,
    RunDetail,
    RunListQuery,
    RunPage,
    Transcript,
    TreeView,
)
from tether.server.routing import ApiError, Call
from tether.server.state import ServerState


def state_of(call: Call) -> ServerState:
    state: ServerState = call.request.app.state.tether
    return state


def not_found(run_id: str) -> ApiError:
    return ApiError(404, "run-not-found", f"no run {run_id!r} in this store; list runs with GET /api/runs",
                    run_id=run_id)


async def load_run(state: ServerState, run_id: str) -> tuple[RunMeta, list[JournalEntry]]:
    """The run's meta and journal, or a 404. A journal whose meta was never written gets one from its genesis."""
    store = await state.engine.store()
    meta = await store.get_meta(run_id)
    entries = await store.load(run_id)
    if meta is None:
        first = views.genesis(entries)
        if first is None or not isinstance(first.value, dict):
            raise not_found(run_id)
        last = JournalIndex.build(entries).last_settle()
        status = last.value.get("status") if last is not None and isinstance(last.value, dict) else "running"
        at = first.started_at or 0.0
        meta = RunMeta(run_id=run_id, workflow=str(first.value.get("workflow") or "?"), status=status,
                       budget_usd=first.value.get("budget_usd"), created_at=at, updated_at=at)
    return meta, entries


async def health(call: Call) -> Health:
    state = state_of(call)
    return Health(version=version(), mode=state.mode)


def version() -> str:
    """The installed tether's version (what `/healthz` and the OpenAPI document report)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:
        return "0+unknown"


async def list_runs(call: Call) -> RunPage:
    """Newest first, filtered by status, paged by an opaque cursor over `store.list_runs`."""
    state, q = state_of(call), call.query
    assert isinstance(q, RunListQuery)
    after = views.decode_cursor(q.cursor) if q.cursor else None
    store = await state.engine.store()
    rounds = 0
    while True:
        size = views.fetch_size(q.limit, rounds)
        metas = await store.list_runs(limit=size)
        page, more = views.page_after(metas, after, q.status, q.limit)
        if more or len(metas) < size:
            break
        rounds += 1
    rows = []
    for meta in page:
        rows.append(views.summary(meta, await store.load(meta.run_id), state.driving(meta.run_id)))
    return RunPage(runs=rows, next_cursor=views.encode_cursor(page[-1]) if more and page else None)


async def get_run(call: Call) -> RunDetail:
    state = state_of(call)
    meta, entries = await load_run(state, call.run_id)
    return views.detail(meta, entries, state.driving(call.run_id), meta.workflow in state.engine.workflows)


async def journal(call: Call) -> JournalPage:
    state, q = state_of(call), call.query
    assert isinstance(q, JournalQuery)
    _, entries = await load_run(state, call.run_id)
    after = int(q.cursor) if q.cursor is not None else 0
    rest = [e for e in entries if (e.seq or 0) > after]
    page = rest[: q.limit]
    more = len(rest) > q.limit
    return JournalPage(run_id=call.run_id, entries=page, total=len(entries),
                       next_cursor=str(page[-1].seq) if more and page else None,
                       reuse=views.reuse_marks(entries, page))


async def agent_tree(call: Call) -> TreeView:
    state = state_of(call)
    _, entries = await load_run(state, call.run_id)
    return views.tree(call.run_id, entries, state.driving(call.run_id))


async def cost(call: Call) -> CostReport:
    _, entries = await load_run(state_of(call), call.run_id)
    return fold_cost(entries)


async def run_diff(call: Call) -> RunDiff:
    """`engine.diff(run_id, other)`: both runs' agent calls side by side (a fork's reused copies marked)."""
    state = state_of(call)
    for run_id in (call.run_id, call.path["other"]):
        await load_run(state, run_id)
    return await state.engine.diff(call.run_id, call.path["other"])


async def forks(call: Call) -> ForkList:
    """The runs forked from this one. A fork is created after its source, so the listing (newest first) is read
    only back to the source's creation, in growing rounds."""
    state = state_of(call)
    meta, _ = await load_run(state, call.run_id)
    store = await state.engine.store()
    rounds = 0
    while True:
        size = views.fetch_size(100, rounds)
        metas = await store.list_runs(limit=size)
        if len(metas) < size or metas[-1].created_at < meta.created_at:
            break
        rounds += 1
    return ForkList(run_id=call.run_id, forks=views.forks_of(meta, metas))


async def ledger(call: Call) -> LedgerView:
    state = state_of(call)
    await load_run(state, call.run_id)
    return LedgerView(run_id=call.run_id, records=await state.engine.effect_ledger(call.run_id))


async def transcript(call: Call) -> Transcript:
    """The agent's last checkpoint (its conversation so far) plus its journaled output."""
    state = state_of(call)
    _, entries = await load_run(state, call.run_id)
    agent_id = int(call.path["agent_id"])
    running = next((e for e in entries if e.kind == "agent" and e.ref is None and e.agent_id == agent_id), None)
    if running is None or running.seq is None:
        raise ApiError(404, "agent-not-found", f"run {call.run_id!r} has no agent #{agent_id}; "
                       f"GET /api/runs/{call.run_id}/tree lists its agents", run_id=call.run_id, agent_id=agent_id)
    terminal = JournalIndex.build(entries).terminal_of.get(running.seq)
    read = await state.engine.transcript(call.run_id, agent_id)
    value = terminal.value if terminal is not None and isinstance(terminal.value, dict) else {}
    usage = terminal.usage if terminal is not None and terminal.usage is not None else None
    return Transcript(
        run_id=call.run_id, agent_id=agent_id, label=running.label,
        status=(terminal.status if terminal is not None else None) or "running",
        checkpoint_ref=read.checkpoint_ref, checkpointed=read.checkpointed,
        turns=int(value.get("turns") or read.turns), messages=read.messages,
        output=value.get("output"), error=terminal.error if terminal is not None else None,
        usage=usage or read.usage, served_by=(terminal.served_by if terminal is not None else None) or read.served_by,
        redacted=read.redacted or (terminal is not None and terminal.redacted is not None),
    )


async def events(call: Call) -> Response:
    """SSE: live events of a run driven here; otherwise the journal's history, followed until it settles.

    Each stream holds one of the server's slots while it is open (503 `too-many-streams` when none is free).
    """
    state = state_of(call)
    await load_run(state, call.run_id)
    last = call.request.headers.get("last-event-id", "")
    after = int(last) if last.isdigit() else 0
    live = state.driving(call.run_id)
    if live is not None:
        stream = live_events(live.handle, after)
    else:
        stream = followed_events(await state.engine.store(), call.run_id, after=after, poll_s=state.poll_s)
    return state.streams.response(stream, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
