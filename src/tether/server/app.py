"""`create_app(engine)`: the Starlette app behind `tether serve`: JSON API, SSE, OpenAPI and the inspector."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Literal

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tether.contracts.retention import CompactResult, StoreStats
from tether.engine.engine import Engine
from tether.engine.redaction import RetentionReport
from tether.engine.retention import DeleteReport, SweepReport
from tether.journal.cost import CostReport
from tether.journal.diff import RunDiff
from tether.server import actions, api, retention, sessions
from tether.server.auth import SESSION_PATH, TokenGate, open_session
from tether.server.hosts import HostGuard, HostPolicy
from tether.server.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_STREAMS, BodyLimit, check_limits
from tether.server.models import (
    CancelRequest,
    CancelResult,
    ForkList,
    Health,
    JournalPage,
    JournalQuery,
    LedgerView,
    RaiseBudgetRequest,
    RaiseBudgetResult,
    ResolveRequest,
    ResolveResult,
    RunDetail,
    RunListQuery,
    RunPage,
    StartRequest,
    StartResult,
    Transcript,
    TreeView,
)
from tether.server.openapi import document
from tether.server.origin import IsolationHeaders, check_write
from tether.server.routing import ApiError, Call, Operation, error_response, routes
from tether.server.state import ServerState

STATIC = Path(__file__).parent / "static"
RUN = "/api/runs/{run_id}"


def operations() -> list[Operation]:
    """Every API route; the OpenAPI document is generated from this list."""
    return [
        Operation("GET", "/healthz", "health", "Liveness (never behind the token)", api.health, Health),
        Operation("GET", "/api/runs", "list_runs", "Runs, newest first, by status, paged by cursor", api.list_runs,
                  RunPage, query=RunListQuery, errors=(400,)),
        Operation("POST", "/api/runs", "start_run", "Start a run of a workflow registered with the app engine",
                  actions.start, StartResult, status=201, body=StartRequest, errors=(404, 409)),
        Operation("GET", RUN, "get_run", "A run: meta, status, last outcome, ceilings, open suspensions", api.get_run,
                  RunDetail, errors=(404,)),
        Operation("GET", f"{RUN}/journal", "get_journal", "Journal entries in seq order, paged", api.journal,
                  JournalPage, query=JournalQuery, errors=(400, 404)),
        Operation("GET", f"{RUN}/tree", "get_tree", "The agent tree, its AgentEvent rows and live queued agents",
                  api.agent_tree, TreeView, errors=(404,)),
        Operation("GET", f"{RUN}/cost", "get_cost", "The cost report (a pure fold over the journal)", api.cost,
                  CostReport, errors=(404,)),
        Operation("GET", f"{RUN}/diff/{{other}}", "get_diff", "This run's agent calls beside another's (engine.diff): "
                  "per call each side's model, cost and output; a fork's reused copies marked", api.run_diff,
                  RunDiff, errors=(404,)),
        Operation("GET", f"{RUN}/forks", "get_forks", "The runs forked from this one (engine.fork), oldest first",
                  api.forks, ForkList, errors=(404,)),
        Operation("GET", f"{RUN}/ledger", "get_ledger", "The tool effect ledger", api.ledger, LedgerView,
                  errors=(404,)),
        Operation("GET", f"{RUN}/events", "get_events", "Server-Sent Events of the run", api.events, None,
                  errors=(404,), stream="text/event-stream",
                  description="Live events when this server drives the run; otherwise events derived from the "
                              "journal (history, then new entries until the run settles). A settled run sends "
                              "its history and ends."),
        Operation("GET", f"{RUN}/agents/{{agent_id}}/transcript", "get_transcript",
                  "An agent's transcript (its last checkpoint) and output", api.transcript, Transcript,
                  errors=(404,), int_params=("agent_id",)),
        Operation("POST", f"{RUN}/resolve", "resolve", "Resolve an open suspension with a JSON value",
                  actions.resolve, ResolveResult, body=ResolveRequest, errors=(404, 409)),
        Operation("POST", f"{RUN}/raise-budget", "raise_budget", "Raise the run's USD ceiling (never lowered); it "
                  "resolves the run's budget suspension, and a parked run this server can drive resumes here",
                  actions.raise_budget, RaiseBudgetResult, body=RaiseBudgetRequest, errors=(400, 404, 409)),
        Operation("POST", f"{RUN}/cancel", "cancel", "Cancel a run as tether cancel does: settled at once when "
                  "nothing drives it, else stopped by its driver (409 once it settled)",
                  actions.cancel, CancelResult, status=202, body=CancelRequest, errors=(404, 409)),
        Operation("DELETE", RUN, "delete_run", "Delete the run with every row and child run it owns (engine.delete); "
                  "409 run-active when it is running, queued or suspended, unless force", retention.delete_run,
                  DeleteReport, query=retention.DeleteQuery, errors=(404, 409)),
        Operation("POST", f"{RUN}/archive", "archive_run", "Empty the run's texts (and its child runs'); numbers, "
                  "statuses, costs, digests and the chain stay; journaled as a decision", retention.archive_run,
                  RetentionReport, body=retention.ArchiveRequest, errors=(404, 409)),
        Operation("POST", f"{RUN}/redact", "redact_run", "Remove one text (match) or one entry's payload (seq) "
                  "everywhere the store keeps it; the chain still verifies; journaled as a decision",
                  retention.redact_run, RetentionReport, body=retention.RedactRequest, errors=(400, 404, 409)),
        Operation("POST", "/api/sweep", "sweep", "Delete the settled runs last updated before a time (dry_run lists "
                  "them); runs that may still move are skipped and named", retention.sweep, SweepReport,
                  body=retention.SweepRequest, errors=(400,)),
        Operation("GET", "/api/store/stats", "store_stats", "What the store holds: runs, entries, bytes, the largest "
                  "runs, blobs", retention.store_stats, StoreStats, query=retention.StatsQuery),
        Operation("POST", "/api/store/compact", "compact_store", "Give the store's free space back (VACUUM)",
                  retention.compact, CompactResult),
        *session_operations(),
    ]


def session_operations() -> list[Operation]:
    """The `/api/sessions` routes (docs/sessions.md)."""
    one = "/api/sessions/{session_id}"
    return [
        Operation("GET", "/api/sessions", "list_sessions", "Sessions, newest first", sessions.list_sessions,
                  sessions.SessionList, query=sessions.SessionListQuery, errors=(400,)),
        Operation("POST", "/api/sessions", "create_session", "Create a session (an existing one answers as it is)",
                  sessions.create_session, sessions.SessionView, status=201, body=sessions.CreateSessionRequest,
                  errors=(409,)),
        Operation("GET", one, "get_session", "A session: its turn tree (every line), head, ceiling and per-turn cost",
                  sessions.get_session, sessions.SessionView, errors=(404,)),
        Operation("POST", f"{one}/turns", "send_turn", "Run the next turn on the head (409 when another send won)",
                  sessions.send_turn, sessions.TurnView, status=201, body=sessions.SendRequest,
                  errors=(404, 409)),
        Operation("POST", f"{one}/branch", "branch_session", "Move the head to a turn: the next send continues "
                  "from it", sessions.branch, sessions.SessionView, body=sessions.BranchRequest, errors=(404, 409)),
    ]


def create_app(
    engine: Engine,
    *,
    token: str | None = None,
    mode: Literal["app", "store"] = "app",
    owns_engine: bool = False,
    poll_s: float = 0.5,
    allowed_hosts: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_streams: int = DEFAULT_MAX_STREAMS,
) -> Starlette:
    """The ASGI app over `engine`; `mode="store"` serves the read side of a store without starting runs.

    `allowed_hosts` are the `Host` names answered besides localhost and IP addresses (`*.example.org`,
    or `*` for any); bodies over `max_body_bytes` get 413, event streams past `max_streams` get 503.
    Runs the embedding program starts itself can be driven through the API too once handed over:
    `app.state.tether.track(engine.start(...))`.
    """
    check_limits(max_body_bytes=max_body_bytes, max_streams=max_streams)
    hosts = HostPolicy(allowed_hosts)
    state = ServerState(engine, token=token, mode=mode, owns_engine=owns_engine, poll_s=poll_s,
                        max_streams=max_streams)
    ops = operations()

    async def openapi(request: Request) -> Response:
        names = sorted(engine.workflows) if mode == "app" else []
        return JSONResponse(document(ops, version=api.version(), token=token is not None, workflows=names))

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await state.shutdown()

    app = Starlette(
        routes=[
            *routes(ops, check_write=check_write),
            Route(SESSION_PATH, open_session, methods=["POST"]),
            Route("/api/openapi.json", openapi, methods=["GET"]),
            Route("/", index, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[  # outermost first
            Middleware(IsolationHeaders),
            Middleware(HostGuard, policy=hosts),
            Middleware(BodyLimit, max_bytes=max_body_bytes),
            Middleware(TokenGate, token=token),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.tether = state
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    headers = dict(exc.headers or {})
    return error_response(ApiError(exc.status_code, code, f"{request.method} {request.url.path}: {exc.detail}"),
                          headers=headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(500, "internal", f"{type(exc).__name__}: {exc}"))


__all__ = ["Call", "create_app", "operations"]
