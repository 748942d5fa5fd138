"""`tether session new/send/show/branch/raise/list`: conversations as turn trees (docs/sessions.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from tether.cli.app import resolve
from tether.cli.shell import JsonOpt, StoreOpt, console, emit_json, esc, parse_args, run_async

if TYPE_CHECKING:
    from tether.engine.engine import Engine
    from tether.engine.sessions import Turn

T = TypeVar("T")
session_app = typer.Typer(help="Conversations: turns as runs in a tree, with a head, branches and a USD ceiling.",
                          no_args_is_help=True)

AppOpt = Annotated[str | None, typer.Option("--app", help="MODULE:ENGINE whose engine (and store) to use.")]
SessionArg = Annotated[str, typer.Argument(help="The session's id.")]


def register(app: typer.Typer) -> None:
    app.add_typer(session_app, name="session")


def _on_engine(app_target: str | None, store: str | None, fn: Callable[[Engine], Awaitable[T]],
               workflow: str | None = None) -> T:
    resolved = resolve(app=app_target, store=store, workflow=workflow)

    async def go() -> T:
        try:
            return await fn(resolved.engine)
        finally:
            await resolved.engine.close()

    return run_async(go)


def _turn_line(t: Turn) -> str:
    cost = f"{t.cost_usd:.6f} USD"
    stop = f"  [{esc(t.stop.value)}] {esc(t.why)}" if t.stop is not None else ""
    return f"turn {t.index}  {esc(t.run_id or '-')}  parent {esc(t.parent or '-')}  {esc(t.status)}  {cost}{stop}"


@session_app.command("new")
def new(session_id: SessionArg, app_target: AppOpt = None, store: StoreOpt = None,
        workspace: Annotated[str | None, typer.Option("--workspace", help="Its memory scope.")] = None,
        budget: Annotated[float | None, typer.Option("--budget", min=0.0, help="A USD ceiling across turns.")] = None,
        json_out: JsonOpt = False) -> None:
    """Create a session (an existing one is shown as it is)."""

    async def go(engine: Engine) -> dict[str, Any]:
        return (await engine.session(session_id, workspace=workspace, budget_usd=budget).record()).to_json()

    doc = _on_engine(app_target, store, go)
    if json_out:
        emit_json(doc)
        return
    ceiling = "no ceiling" if doc["budget_usd"] is None else f"ceiling {doc['budget_usd']} USD"
    console().print(f"session {esc(session_id)} in workspace {esc(doc['workspace'])}, {ceiling}")


@session_app.command("send")
def send(session_id: SessionArg, prompt: Annotated[str, typer.Argument(help="The user's message.")],
         workflow: Annotated[str, typer.Option("--workflow", help="MODULE:WORKFLOW, or a name the app registers.")],
         app_target: AppOpt = None, store: StoreOpt = None,
         args: Annotated[str | None, typer.Option("--args", help="More workflow args, a JSON object.")] = None,
         budget: Annotated[float | None, typer.Option("--budget", min=0.0, help="This turn's own USD ceiling.")] = None,
         json_out: JsonOpt = False) -> None:
    """Run the next turn on the session's head (a conflict exits non-zero: send again or branch)."""
    named = workflow if ":" in workflow else None
    given = {**(parse_args(args) or {}), "prompt": prompt}

    async def go(engine: Engine) -> Turn:
        wf: Any = resolved_wf if resolved_wf is not None else workflow
        return await engine.session(session_id).send(given, workflow=wf, budget_usd=budget)

    resolved_wf = resolve(app=app_target, store=store, workflow=named).workflow if named else None
    turn = _on_engine(app_target, store, go, named)
    if json_out:
        emit_json(turn.to_json())
        return
    console().print(_turn_line(turn))
    if turn.answer is not None:
        console().print(esc(turn.answer))


@session_app.command("show")
def show(session_id: SessionArg, app_target: AppOpt = None, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """The session's turn tree (every line), its head and what its turns cost."""

    async def go(engine: Engine) -> dict[str, Any]:
        session = engine.session(session_id)
        return {**(await session.record()).to_json(), "turns": [t.to_json() for t in await session.turns()],
                "spent_usd": await session.spent_usd()}

    doc = _on_engine(app_target, store, go)
    if json_out:
        emit_json(doc)
        return
    con = console()
    of = f" of {doc['budget_usd']}" if doc["budget_usd"] is not None else ""
    con.print(f"session {esc(session_id)}  workspace {esc(doc['workspace'])}  head {esc(doc['head'] or '-')}  "
              f"spent {doc['spent_usd']:.6f} USD{of}")
    children: dict[str | None, list[dict[str, Any]]] = {}
    for t in doc["turns"]:
        children.setdefault(t["parent"], []).append(t)

    def walk(parent: str | None, depth: int) -> None:
        for t in children.get(parent, []):
            head = "  <- head" if t["run_id"] == doc["head"] else ""
            con.print(f"{'  ' * depth}turn {t['index']}  {esc(t['run_id'])}  {esc(t['status'])}  "
                      f"{t['cost_usd']:.6f} USD{head}")
            walk(t["run_id"], depth + 1)

    walk(None, 0)


@session_app.command("branch")
def branch(session_id: SessionArg, turn: Annotated[str, typer.Argument(help="The turn's index or run id.")],
           app_target: AppOpt = None, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Move the head to TURN: the next send continues from it; the other lines stay readable."""

    async def go(engine: Engine) -> dict[str, Any]:
        return (await engine.session(session_id).branch(int(turn) if turn.isdigit() else turn)).to_json()

    doc = _on_engine(app_target, store, go)
    if json_out:
        emit_json(doc)
        return
    console().print(f"session {esc(session_id)}: head is now {esc(doc['head'])}")


@session_app.command("raise")
def raise_(session_id: SessionArg, usd: Annotated[float, typer.Argument(min=0.0, help="The new USD ceiling.")],
           app_target: AppOpt = None, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Raise the session's USD ceiling across turns (never lowered): later turns get what it leaves."""

    async def go(engine: Engine) -> dict[str, Any]:
        return (await engine.session(session_id).raise_budget(usd)).to_json()

    doc = _on_engine(app_target, store, go)
    if json_out:
        emit_json(doc)
        return
    console().print(f"session {esc(session_id)}: ceiling is now {doc['budget_usd']} USD")


@session_app.command("list")
def list_(app_target: AppOpt = None, store: StoreOpt = None,
          limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many, newest first.")] = 100,
          json_out: JsonOpt = False) -> None:
    """Sessions, newest first."""
    from tether.engine.sessions import session_records

    async def go(engine: Engine) -> list[dict[str, Any]]:
        return [s.to_json() for s in await session_records(engine, limit)]

    found = _on_engine(app_target, store, go)
    if json_out:
        emit_json(found)
        return
    con = console()
    if not found:
        con.print("no sessions")
    for s in found:
        con.print(f"{esc(s['session_id'])}  workspace {esc(s['workspace'])}  head {esc(s['head'] or '-')}  "
                  f"version {s['version']}")
