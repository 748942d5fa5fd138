"""The session side of the API (`/api/sessions/...`): list, read, create, send a turn, branch (docs/sessions.md).

Every figure is the one `tether session show --json` prints: a turn's cost is its run's cost report total.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tether.contracts.errors import ConfigError
from tether.contracts.sessions import SessionNotFoundError, SessionStore
from tether.engine.sessions import Session, Turn, session_records
from tether.journal.canonical import to_jsonable
from tether.server.api import state_of
from tether.server.models import BODY
from tether.server.routing import ApiError, Call


class TurnView(BaseModel):
    """One turn: its run, parent turn, status and cost (from the run's cost report)."""

    session_id: str
    index: int
    run_id: str | None
    parent: str | None
    status: str
    cost_usd: float
    grant_usd: float | None = None
    answer: Any = None
    stop: str | None = None
    why: str | None = None


class SessionSummary(BaseModel):
    """A session as a list shows it: its head, ceiling and version."""

    session_id: str
    workspace: str
    head: str | None
    budget_usd: float | None
    version: int
    created_at: float


class SessionView(SessionSummary):
    """A session with every turn of every line, its head and what its turns count against its ceiling."""

    spent_usd: float
    turns: list[TurnView]


class SessionList(BaseModel):
    sessions: list[SessionSummary]


class SessionListQuery(BaseModel):
    limit: int = Field(default=100, ge=1, le=1000)


class CreateSessionRequest(BaseModel):
    """`POST /api/sessions`: a session (an existing id answers as it is; 409 when it names another workspace)."""

    model_config = BODY

    session_id: str = Field(min_length=1, max_length=200)
    workspace: str | None = Field(default=None, max_length=200)
    budget_usd: float | None = Field(default=None, ge=0)


class SendRequest(BaseModel):
    """`POST /api/sessions/{session_id}/turns`: run the next turn (answered when the turn has settled)."""

    model_config = BODY

    workflow: str = Field(description="A workflow registered with the app engine.")
    prompt: str
    args: dict[str, Any] = Field(default_factory=dict, description="More workflow args beside prompt.")
    budget_usd: float | None = Field(default=None, ge=0, description="The turn's own USD ceiling.")


class BranchRequest(BaseModel):
    """`POST /api/sessions/{session_id}/branch`: move the head to a turn (its index)."""

    model_config = BODY

    turn: int = Field(ge=1)


def turn_view(t: Turn) -> TurnView:
    return TurnView.model_validate({**t.to_json(), "answer": to_jsonable(t.answer, what="a turn's answer")})


async def view(session: Session) -> SessionView:
    rec = await session.record()
    return SessionView(**rec.to_json(), spent_usd=await session.spent_usd(),
                       turns=[turn_view(t) for t in await session.turns()])


async def _existing(call: Call) -> Session:
    engine, session_id = state_of(call).engine, call.path["session_id"]
    store = await engine.store()
    if not isinstance(store, SessionStore) or await store.session_get(session_id) is None:
        raise SessionNotFoundError(f"no session {session_id!r} in this store; create it with POST /api/sessions",
                                   session=session_id)
    return engine.session(session_id)


async def list_sessions(call: Call) -> SessionList:
    query = call.query
    assert isinstance(query, SessionListQuery)
    found = await session_records(state_of(call).engine, query.limit)
    return SessionList(sessions=[SessionSummary(**s.to_json()) for s in found])


async def get_session(call: Call) -> SessionView:
    return await view(await _existing(call))


async def create_session(call: Call) -> SessionView:
    body = call.body
    assert isinstance(body, CreateSessionRequest)
    session = state_of(call).engine.session(body.session_id, workspace=body.workspace, budget_usd=body.budget_usd)
    try:
        return await view(session)
    except ConfigError as exc:  # it exists in another workspace
        raise ApiError(409, "session-exists", exc.message, session=body.session_id) from None


async def send_turn(call: Call) -> TurnView:
    """Run the next turn on the head here (409 `session-conflict` when another send moved it first)."""
    state, body = state_of(call), call.body
    assert isinstance(body, SendRequest)
    if state.mode != "app":
        raise ApiError(409, "no-app-engine", "this server only reads a store; start it with --app MODULE:ENGINE "
                       "to send turns")
    if body.workflow not in state.engine.workflows:
        raise ApiError(404, "workflow-not-found", f"no workflow named {body.workflow!r} is registered with the app "
                       f"engine; known: {sorted(state.engine.workflows)}", workflow=body.workflow)
    session = await _existing(call)
    turn = await session.send({**body.args, "prompt": body.prompt}, workflow=body.workflow,
                              budget_usd=body.budget_usd)
    return turn_view(turn)


async def branch(call: Call) -> SessionView:
    body = call.body
    assert isinstance(body, BranchRequest)
    session = await _existing(call)
    await session.branch(body.turn)
    return await view(session)
